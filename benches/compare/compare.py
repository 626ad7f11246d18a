#!/usr/bin/env python3
"""Side-by-side: mobile-r1-eval vs HF transformers on the same machine, in one run.

1. Writes a random-weight Qwen2.5-VL checkpoint in the Hugging Face layout (preset `small`: Qwen2.5-0.5B text
   dimensions with the real 3B vision tower; `tiny` for a quick check), f32, with the project's derived
   tokenizer and chat template. The `qwen3-*` presets write a random Qwen3-VL checkpoint instead, bf16, with the
   writer of qwen3_parity.py (the Qwen3 tokenizer and the fixtures' Qwen3-VL template): `qwen3-tiny` has the
   shape of tests/fixtures/models/qwen3-tiny-a, `qwen3-small` Qwen3-VL-2B's vision tower (24 blocks of 1024,
   DeepStack after blocks 5/11/17) with Qwen3-0.6B's text dimensions (28 layers, hidden 1024, MLP 3072, 16 query
   and 8 KV heads of 128, tied embeddings), `qwen3-2b` the real Qwen3-VL-2B shape. Both engines load it in
   `--dtype` (bf16 values are exact in f32).
2. Writes a benchmark folder of N step prompts (1080x2400 synthetic phone screenshots, data.jsonl).
3. Runs the N step prompts through transformers (PyTorch, f32, greedy, batched with left padding, SDPA), built
   with exactly the prompts mobile-r1-eval renders (the same prompts/*.jinja files, the same chat template; for
   Qwen3-VL the family's system prompt declaring the 999x999 relative grid, as the program picks by default).
4. Runs `mobile-r1-eval eval --no-judge` on the same folder.
5. Checks that both produce the same text for every step (enforced in f32; counted in bf16/f16) and prints
   steps/s of each, the ratio, peak RSS (and peak GPU memory) of each, and the machine's matmul throughput in
   the run's dtype (torch, square and vision-MLP shapes) measured in the same run, mobile-r1-eval's prefill rate
   (vision included) in FLOP/s, the CPU model and flags, and the load average before and after.

6. Compares each step's greedy tokens and their top-5 log-probs (`logprob_parity` in the result; skip with
   `--no-logprobs`): transformers' come from the logits of the timed run (log_softmax in f32), mobile-r1-eval's
   from its `serve` command sent the very messages transformers rendered, one step at a time, after the timed
   rounds. Per step: tokens identical, the first differing position, and the largest |Δ log-prob| over the tokens
   in both top-5 lists at each position whose context the two engines share (benches/compare/logprob_parity.py).
   `--transformers-other-dtype` also runs transformers in the other dtype (f32 for a bf16 or f16 run, bf16 for
   f32) and reports whether its tokens agree with its run in `--dtype`, and how many of the steps where they do
   mobile-r1-eval matches.

With `--rounds R` both engines run R times, alternating (transformers, mobile-r1-eval, transformers, ...), on the
same checkpoint and prompts; each round is reported and the summary uses the best round of each engine.
`--screenshots DIR` takes the step screenshots from the PNG files of DIR (sorted, cycled) instead of synthetic
screens, e.g. the real 1080x2400 Chinese-app screenshots of ../shared/data/standins/standin_cn_mai-ui_139mail_trajectory.

Usage (from the repository root, after `cargo build --release`):

    .venv-fixtures/bin/python benches/compare/compare.py --preset small --steps 4 --max-pixels 250880
    .venv-fixtures/bin/python benches/compare/compare.py --preset tiny --steps 16      # quick check
    .venv-fixtures/bin/python benches/compare/compare.py --preset qwen3-tiny --steps 4  # Qwen3-VL quick check
    .venv-fixtures/bin/python benches/compare/compare.py --preset qwen3-small --steps 2 --batch 1 \
        --max-pixels 1003520
    .venv-compare/bin/python benches/compare/compare.py --preset small --steps 3 --batch 1 --rounds 2 \
        --max-pixels 1003520 --screenshots ../shared/data/standins/standin_cn_mai-ui_139mail_trajectory
    python3 benches/compare/compare.py --preset 3b --device cuda --dtype bf16 --steps 64 --batch 32 \
        --max-pixels 1003520 --binary path/to/cuda/mobile-r1-eval                     # on a GPU machine

Each engine runs in its own process (peak RSS is per process). Needs the fixtures venv (see
tests/fixtures/make_fixtures.py for its setup) and `jinja2` (a transformers dependency).
"""
import argparse
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import time

import numpy as np
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROMPTS = os.path.join(ROOT, "prompts")
TOKENIZER = os.path.join(ROOT, "tests", "fixtures", "tokenizer")


def fixtures_module():
    spec = importlib.util.spec_from_file_location("make_fixtures", os.path.join(ROOT, "tests", "fixtures", "make_fixtures.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def qwen3_module():
    """benches/compare/qwen3_parity.py: the Qwen3-VL presets and checkpoint writer (it imports the fixtures'
    make_qwen3_fixtures.py itself)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import qwen3_parity
    return qwen3_parity


PRESETS = {
    "tiny": dict(text=dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=1, num_key_value_heads=1,
                           intermediate_size=48),
                 vision=dict(depth=3, fullatt_block_indexes=[2], hidden_size=32, num_heads=2, intermediate_size=64,
                             window_size=112),
                 mrope=[2, 3, 3], tie=False),
    "small": dict(text=dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                            intermediate_size=4864),
                  vision=dict(depth=32, fullatt_block_indexes=[7, 15, 23, 31], hidden_size=1280, num_heads=16,
                              intermediate_size=3420, window_size=112),
                  mrope=[8, 12, 12], tie=True),
    "3b": dict(text=dict(hidden_size=2048, num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2,
                         intermediate_size=11008),
               vision=dict(depth=32, fullatt_block_indexes=[7, 15, 23, 31], hidden_size=1280, num_heads=16,
                           intermediate_size=3420, window_size=112),
               mrope=[16, 24, 24], tie=True),
}
# Qwen3-VL presets: the spec dicts of qwen3_parity.py's writer (text, vision, mrope, tie, seed).
QWEN3_SMALL = dict(text=dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                             num_key_value_heads=8, head_dim=128),
                   mrope=[24, 20, 20], tie=True, seed=1)  # vision: Qwen3-VL-2B's, filled in by qwen3_spec
QWEN3_PRESETS = {"qwen3-tiny": "tiny", "qwen3-small": None, "qwen3-2b": "2b"}
QWEN3_SYSTEM_GRID = 999  # the relative grid the Qwen3-VL system prompt declares (the family's default frame)


def qwen3_spec(preset):
    """The writer's spec of a `qwen3-*` preset."""
    q3p = qwen3_module()
    name = QWEN3_PRESETS[preset]
    return q3p.PRESETS[name] if name else dict(QWEN3_SMALL, vision=q3p.VISION_4B)


DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def write_checkpoint(fx, preset, out, seed, max_pixels, device, dtype):
    """The random checkpoint, built and re-randomised on `device` (a GPU makes the 3B preset take seconds), saved
    in `dtype`; a Qwen3-VL one is built on the CPU with its preset's own seed and saved in bf16."""
    if preset in QWEN3_PRESETS:
        q3p = qwen3_module()
        q3p.write_checkpoint(out, qwen3_spec(preset), q3p.q3.HUB_MIN_PIXELS, max_pixels)
        return
    from transformers import Qwen2_5_VLForConditionalGeneration
    spec = PRESETS[preset]
    cfg = fx.make_config(spec["text"], spec["vision"], spec["mrope"], spec["tie"])
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration(cfg).to(DTYPES[dtype]).eval()
    fx.rerandomize(model, seed, lm_head_norm=1.0, device=None if device == "cpu" else device)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER, fn), os.path.join(out, fn))
    tpl = json.load(open(os.path.join(TOKENIZER, "tokenizer_config.json")))["chat_template"]
    json.dump({"chat_template": tpl}, open(os.path.join(out, "chat_template.json"), "w"))
    pre = dict(fx.HUB_PREPROCESSOR, max_pixels=max_pixels)
    json.dump(pre, open(os.path.join(out, "preprocessor_config.json"), "w"), indent=2)
    json.dump(fx.GENERATION_CONFIG, open(os.path.join(out, "generation_config.json"), "w"), indent=2)


def write_benchmark(fx, out, n_steps, screenshots=None):
    """N steps: trajectories of up to 4 steps on 1080x2400 screens, each step with its own screenshot (synthetic,
    or the PNG files of `screenshots`, sorted and cycled)."""
    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    real = sorted(os.path.join(screenshots, f) for f in os.listdir(screenshots) if f.endswith(".png")) \
        if screenshots else []
    if screenshots and not real:
        sys.exit(f"--screenshots {screenshots}: no PNG files")
    lines, k = [], 0
    while k < n_steps:
        t = len(lines)
        steps = []
        for s in range(min(4, n_steps - k)):
            name = f"t{t}_s{s}.png"
            if real:
                shutil.copy(real[k % len(real)], os.path.join(out, "images", name))
            else:
                fx.save_png(out, name, fx.pattern_screen(2400, 1080, seed=7 + 10 * t + s))
            name = "images/" + name
            steps.append({"image": name, "thought": "", "subtask": f"第{s + 1}步：点击搜索框并输入商品名称",
                          "action": {"name": "mobile_use", "arguments": {"action": "click", "coordinate": [540, 300]}},
                          "response": ""})
            k += 1
        lines.append({"id": str(t), "app_name": "淘宝", "trajectory_length": len(steps),
                      "instruction": "打开淘宝，搜索无线蓝牙降噪耳机，按销量排序后查看第一个商品", "image_width": 1080,
                      "image_height": 2400, "trajectory": steps})
    with open(os.path.join(out, "data.jsonl"), "w") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    return lines


def hf_messages(traj, si, resized_w, resized_h, qwen3=False):
    """The step prompt exactly as mobile-r1-eval builds it (eval/prompts.rs, prompts/*.jinja): the family's system
    prompt declaring the resized screenshot (Qwen2.5-VL) or the relative grid (Qwen3-VL)."""
    import jinja2
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False)
    name, (width, height) = ("system_mobile_use_qwen3.jinja", (QWEN3_SYSTEM_GRID,) * 2) if qwen3 \
        else ("system_mobile_use.jinja", (resized_w, resized_h))
    system = env.from_string(open(os.path.join(PROMPTS, name)).read()).render(width=width, height=height)
    history = [s["subtask"] for s in traj["trajectory"][:si]]
    user = env.from_string(open(os.path.join(PROMPTS, "step_user.jinja")).read()).render(
        instruction=traj["instruction"], history=history)
    return [{"role": "system", "content": system},
            {"role": "user", "content": [{"type": "text", "text": user}, {"type": "image"}]}]


def run_transformers(ckpt, data, lines, batch, max_new, device, dtype, qwen3=False):
    from PIL import Image
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration, Qwen3VLForConditionalGeneration
    torch.set_num_threads(os.cpu_count() or 1)
    proc = AutoProcessor.from_pretrained(ckpt)
    proc.tokenizer.padding_side = "left"
    placement = {} if device == "cpu" else {"device_map": device}  # device_map needs accelerate
    cls = Qwen3VLForConditionalGeneration if qwen3 else Qwen2_5_VLForConditionalGeneration
    model = cls.from_pretrained(ckpt, dtype=DTYPES[dtype], attn_implementation="sdpa", **placement).eval()
    patch = proc.image_processor.patch_size
    jobs = [(t, si) for t in lines for si in range(len(t["trajectory"]))]
    texts, images, messages = [], [], []
    for t, si in jobs:
        img = Image.open(os.path.join(data, t["trajectory"][si]["image"])).convert("RGB")
        grid = proc.image_processor(images=[img], return_tensors="pt")["image_grid_thw"][0].tolist()
        msgs = hf_messages(t, si, grid[2] * patch, grid[1] * patch, qwen3)
        messages.append([msgs, t["trajectory"][si]["image"]])
        texts.append(proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False))
        images.append(img)
    outputs, lengths, scored = [], [], []
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sync()
    t0 = time.time()
    with torch.inference_mode():
        for i in range(0, len(jobs), batch):
            inputs = proc(text=texts[i:i + batch], images=images[i:i + batch], return_tensors="pt", padding=True)
            inputs = inputs.to(device)
            lengths += [int(n) for n in inputs["attention_mask"].sum(dim=1)]
            gen = model.generate(**inputs, max_new_tokens=max_new, do_sample=False, repetition_penalty=1.0,
                                 eos_token_id=[151645, 151643], pad_token_id=151643,
                                 return_dict_in_generate=True, output_logits=True)
            rows = gen.sequences[:, inputs["input_ids"].shape[1]:]
            for b, row in enumerate(rows):
                ids = [int(x) for x in row if int(x) not in (151645, 151643)]
                outputs.append(proc.tokenizer.decode(ids, skip_special_tokens=True))
                scored.append(top_logprobs(proc.tokenizer, row, [step[b] for step in gen.logits]))
    sync()
    wall = time.time() - t0
    keys = [(t["id"], si) for t, si in jobs]
    gpu = torch.cuda.max_memory_reserved() if device.startswith("cuda") else None
    vision = sum(p.numel() for p in model.model.visual.parameters())
    embed = model.model.language_model.embed_tokens.weight.numel()
    body = sum(p.numel() for p in model.model.language_model.parameters()) - embed
    params = {"vision": vision, "language_model_body": body}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return (dict(zip(keys, outputs)), wall, rss, gpu, params, dict(zip(keys, lengths)), dict(zip(keys, scored)),
            dict(zip(keys, messages)))


STOP_IDS = (151645, 151643)


def byte_decoder():
    """The inverse of the byte-level BPE alphabet: printable Latin-1 bytes stand for themselves, the other 68 byte
    values for the characters from U+0100 on, in byte order."""
    kept = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    chars = {b: chr(b) for b in kept}
    for i, b in enumerate(b for b in range(256) if b not in chars):
        chars[b] = chr(256 + i)
    return {c: b for b, c in chars.items()}


def token_bytes(tokenizer, token_id, _decoder=byte_decoder()):
    """The bytes one token stands for (an added token such as `<|im_end|>`: its text), as the server reports them,
    so the two engines' top-5 lists compare token by token."""
    piece = tokenizer.convert_ids_to_tokens(int(token_id))
    if piece is None:
        return b""
    if all(c in _decoder for c in piece):
        return bytes(_decoder[c] for c in piece)
    return piece.encode("utf-8")


def top_logprobs(tokenizer, row, logits, k=5):
    """One generated row's tokens up to the first stop token (as bytes, hex) and each position's top-`k`
    (token bytes hex, log-prob) from log_softmax over the full logit row in f32."""
    tokens, tops = [], []
    for tid, step in zip(row.tolist(), logits):
        if tid in STOP_IDS:
            break
        lp = torch.log_softmax(step.float(), dim=-1)
        vals, ids = lp.topk(k)
        tokens.append(token_bytes(tokenizer, tid).hex())
        tops.append([[token_bytes(tokenizer, i).hex(), float(v)] for i, v in zip(ids.tolist(), vals.tolist())])
    return {"tokens": tokens, "top5": tops}


def matmul_tflops(device, dtype, shape=None):
    """Best of three products (m, k, n) in `dtype`, by default square (2048 on CPU, 8192 on a GPU): torch's
    matmul rate on this machine."""
    n = 2048 if device == "cpu" else 8192
    m, k, n = shape or (n, n, n)
    a = torch.randn(m, k, device=device, dtype=DTYPES[dtype])
    b = torch.randn(k, n, device=device, dtype=DTYPES[dtype])
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    a @ b
    sync()
    best = float("inf")
    for _ in range(3):
        t = time.time()
        a @ b
        sync()
        best = min(best, time.time() - t)
    return 2 * m * k * n / best / 1e12


def cpu_description():
    """The CPU model, its vector flags and the logical CPU count, from /proc/cpuinfo (Linux)."""
    model, flags = "", []
    try:
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            if key.strip() == "flags" and not flags:
                flags = sorted(f for f in value.split() if f.startswith(("avx", "fma", "amx")))
    except OSError:
        pass
    return {"model": model, "vector_flags": flags, "logical_cpus": os.cpu_count()}


def run_hf(args, dtype=None):
    """transformers in a child process (its peak RSS is its own), in `dtype` (default the run's)."""
    child = subprocess.run([sys.executable, __file__, "--role", "hf", "--preset", args.preset, "--work", args.work,
                            "--batch", str(args.batch), "--max-new-tokens", str(args.max_new_tokens),
                            "--device", args.device, "--dtype", dtype or args.dtype],
                           capture_output=True, text=True)
    if child.returncode != 0:
        sys.exit(f"transformers run failed:\n{child.stderr[-4000:]}")
    return json.loads(child.stdout)


def run_ours(args, ckpt, data, run_dir):
    shutil.rmtree(run_dir, ignore_errors=True)
    subprocess.run([args.binary, "eval", "--model", ckpt, "--data", data, "--out", run_dir, "--no-judge",
                    "--batch-size", str(args.batch), "--max-new-tokens", str(args.max_new_tokens),
                    "--device", args.device, "--dtype", args.dtype], check=True,
                   stdout=subprocess.DEVNULL)
    preds = [json.loads(l) for l in open(os.path.join(run_dir, "predictions.jsonl"))]
    ours = {(p["trajectory"], p["step"]): p["response"] for p in preds}
    tp_lengths = {(p["trajectory"], p["step"]): p["prompt_tokens"] for p in preds}
    tp = json.load(open(os.path.join(run_dir, "throughput.json")))
    manifest = json.load(open(os.path.join(run_dir, "manifest.json")))
    return ours, tp, manifest.get("ops", {}), tp_lengths


def prefill_flops(phase, params):
    """FLOPs of a phase's prefills, vision included: 2 x params per patch and per prompt token, plus the attention
    itself as the engine counts it (`prefill_attention_flops`, as `bench` does; 0 from older builds)."""
    return (2 * params["vision"] * phase["patches"] + 2 * params["language_model_body"] * phase["prefill_tokens"]
            + phase.get("prefill_attention_flops", 0))


OTHER_DTYPE = {"f32": "bf16", "bf16": "f32", "f16": "f32"}


def logprob_parity_pass(args, ckpt, data, first, hf_lengths):
    """Each step's top-5 log-probs from `serve` against transformers' (first round), and with
    --transformers-other-dtype transformers in the other dtype against itself; prints one line per total."""
    import logprob_parity as lp
    keyed = lambda rows: {(t, s): v for t, s, v in rows}
    hf = first["hf"]
    jobs, hf_scored = keyed(hf["messages"]), keyed(hf["scored"])
    ours, ours_texts, ours_lengths = lp.run_ours(args, ckpt, data, jobs, os.path.join(args.work, "serve.log"))
    other = None
    if args.transformers_other_dtype:
        other_dtype = OTHER_DTYPE[args.dtype]
        other = keyed(run_hf(args, other_dtype)["scored"])
    out = lp.parity(sorted(jobs), hf_scored, ours, (ours_texts, first["ours"]), (ours_lengths, hf_lengths), other)
    if other is not None:
        out["transformers_other_dtype"]["dtype"] = other_dtype
    print(f"log-probs: tokens identical in {out['tokens_identical_steps']} steps, max |Δ top-5 log-prob| "
          f"{out['max_abs_top5_logprob_delta']:.3g}" + (
              f"; transformers {args.dtype} vs {other_dtype}: tokens agree in "
              f"{out['transformers_other_dtype']['tokens_identical_steps']} steps, ours identical in "
              f"{out['ours_identical_where_transformers_dtypes_agree']} of those" if other is not None else ""),
          file=sys.stderr, flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="small", choices=sorted(PRESETS) + sorted(QWEN3_PRESETS))
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--max-pixels", type=int, default=250880)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "compare"))
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "mobile-r1-eval"))
    ap.add_argument("--role", default="driver", choices=["driver", "hf"])
    ap.add_argument("--device", default="cpu", help="cpu or cuda (both engines)")
    ap.add_argument("--dtype", default="f32", choices=sorted(DTYPES))
    ap.add_argument("--json-out", help="also write the result object to this file")
    ap.add_argument("--rounds", type=int, default=1, help="alternate the two engines this many times each")
    ap.add_argument("--screenshots", help="folder of PNG screenshots to use instead of synthetic screens")
    ap.add_argument("--no-logprobs", action="store_true",
                    help="skip the log-prob parity pass (mobile-r1-eval serve sent each step's messages)")
    ap.add_argument("--transformers-other-dtype", action="store_true",
                    help="also run transformers in the other dtype (f32 for bf16/f16, bf16 for f32) and report "
                         "whether its tokens agree with its run in --dtype")
    args = ap.parse_args()
    ckpt, data = os.path.join(args.work, f"{args.preset}-ckpt"), os.path.join(args.work, "data")

    if args.role == "hf":  # child process: transformers alone, so its peak RSS is its own
        lines = [json.loads(l) for l in open(os.path.join(data, "data.jsonl"))]
        out, wall, rss, gpu, params, lengths, scored, messages = run_transformers(
            ckpt, data, lines, args.batch, args.max_new_tokens, args.device, args.dtype, args.preset in QWEN3_PRESETS)
        json.dump({"outputs": [[k[0], k[1], v] for k, v in out.items()], "wall": wall, "rss": rss, "gpu": gpu,
                   "params": params, "prompt_tokens": [[k[0], k[1], v] for k, v in lengths.items()],
                   "scored": [[k[0], k[1], v] for k, v in scored.items()],
                   "messages": [[k[0], k[1], v] for k, v in messages.items()]}, sys.stdout)
        return

    fx = fixtures_module()
    shutil.rmtree(args.work, ignore_errors=True)
    write_checkpoint(fx, args.preset, ckpt, args.seed, args.max_pixels, args.device, args.dtype)
    lines = write_benchmark(fx, data, args.steps, args.screenshots)
    load_before = os.getloadavg()
    rounds = []
    for r in range(max(1, args.rounds)):
        hf = run_hf(args)
        ours, tp, ops, lengths = run_ours(args, ckpt, data, os.path.join(args.work, f"run{r}"))
        rounds.append({"hf": hf, "ours": ours, "tp": tp, "ops": ops, "lengths": lengths, "load": os.getloadavg()})
        print(f"round {r + 1}: transformers {hf['wall']:.1f} s, mobile-r1-eval {tp['phases'][0]['wall_seconds']:.1f} s, "
              f"load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    hf_out = {(t, s): v for t, s, v in rounds[0]["hf"]["outputs"]}
    n = len(hf_out)
    same = min(sum(hf_out[k] == r["ours"].get(k) for k in hf_out) for r in rounds)
    # The prompts' token counts (the chat template, the system prompt and the image tokens) do not depend on the
    # dtype: any difference is a prompt built differently, never a rounding difference.
    hf_lengths = {(t, s): v for t, s, v in rounds[0]["hf"]["prompt_tokens"]}
    same_lengths = min(sum(hf_lengths[k] == r["lengths"].get(k) for k in hf_lengths) for r in rounds)
    hf_same = all({(t, s): v for t, s, v in r["hf"]["outputs"]} == hf_out for r in rounds)
    params = rounds[0]["hf"]["params"]
    per_round = []
    for r in rounds:
        phase = r["tp"]["phases"][0]
        per_round.append({
            "transformers_wall_seconds": r["hf"]["wall"], "ours_wall_seconds": phase["wall_seconds"],
            "speedup": r["hf"]["wall"] / phase["wall_seconds"],
            "ours_prefill_seconds": phase["prefill_seconds"],
            "ours_prefill_flops_per_second": prefill_flops(phase, params) / max(phase["prefill_seconds"], 1e-9),
            "transformers_peak_rss_bytes": r["hf"]["rss"], "ours_peak_rss_bytes": r["tp"]["peak_rss_bytes"],
            "load_average_after": r["load"],
        })
    logprobs = None if args.no_logprobs else logprob_parity_pass(args, ckpt, data, rounds[0], hf_lengths)
    hf_wall = min(x["transformers_wall_seconds"] for x in per_round)
    ours_wall = min(x["ours_wall_seconds"] for x in per_round)
    torch_rates = {"square": matmul_tflops(args.device, args.dtype)}
    if args.device == "cpu" and args.dtype == "f32":
        torch_rates["vision_mlp_4992x1280x3420"] = matmul_tflops(args.device, args.dtype, (4992, 1280, 3420))
    best_torch = max(torch_rates.values()) * 1e12
    ours_prefill = max(x["ours_prefill_flops_per_second"] for x in per_round)
    first = rounds[0]
    result = {
        "preset": args.preset, "steps": n, "max_pixels": args.max_pixels, "max_new_tokens": args.max_new_tokens,
        "batch": args.batch, "rounds": len(rounds), "identical_outputs": f"{same}/{n}",
        "identical_prompt_token_counts": f"{same_lengths}/{n}",
        "transformers_repeats_itself": hf_same,
        "screenshots": os.path.abspath(args.screenshots) if args.screenshots else "synthetic",
        "image_tokens_per_screenshot": first["tp"]["phases"][0]["patches"] // max(first["tp"]["phases"][0]["images"], 1) // 4,
        "transformers_steps_per_second": n / hf_wall, "ours_steps_per_second": n / ours_wall,
        "speedup": hf_wall / ours_wall,
        "transformers_peak_rss_bytes": max(x["transformers_peak_rss_bytes"] for x in per_round),
        "ours_peak_rss_bytes": max(x["ours_peak_rss_bytes"] for x in per_round),
        "transformers_peak_gpu_bytes": first["hf"]["gpu"], "ours_peak_gpu_bytes": first["tp"].get("peak_device_bytes"),
        "device": args.device, "dtype": args.dtype,
        "torch_matmul_tflops": torch_rates["square"],
        "torch_matmul_tflops_by_shape": torch_rates,
        "ours_prefill_flops_per_second": ours_prefill,
        "ours_prefill_fraction_of_torch_best_matmul": ours_prefill / best_torch,
        "ours_cpu_gemm": first["ops"].get("cpu_f32_gemm"), "ours_blas_choice": first["ops"].get("cpu_blas_choice"),
        "params": params,
        "per_round": per_round,
        "cpu": cpu_description(), "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "versions": {"torch": torch.__version__, "numpy": np.__version__},
        "cpu_threads": torch.get_num_threads(),
    }
    if logprobs is not None:
        result["logprob_parity"] = logprobs
    print(json.dumps(result, indent=1))
    if args.json_out:
        json.dump(result, open(args.json_out, "w"), indent=1)
    ours = min(rounds, key=lambda r: sum(hf_out[k] == r["ours"].get(k) for k in hf_out))["ours"]
    # Identical tokens are required in f32; in bf16/f16 the two engines' kernels round differently and greedy
    # paths may part after a near-tie, so the count is reported, not enforced.
    if same != n:
        for k in sorted(hf_out):
            if hf_out[k] != ours.get(k):
                print("DIFF", k, repr(hf_out[k][:80]), "vs", repr((ours.get(k) or "")[:80]))
        if args.dtype == "f32":
            sys.exit(1)
    if same_lengths != n:
        for k in sorted(hf_lengths):
            if hf_lengths[k] != first["lengths"].get(k):
                print("PROMPT LENGTH DIFF", k, hf_lengths[k], "vs", first["lengths"].get(k))
        sys.exit(1)


if __name__ == "__main__":
    main()
