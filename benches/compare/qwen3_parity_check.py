#!/usr/bin/env python3
"""Compares `mobile-r1-eval generate --json` with the transformers reference written by qwen3_parity.py.

For each case of OUT/parity.json it reads OURS/case-<i>.json (the `generate --json` object for that screenshot;
with --run BIN it first makes them, running BIN once per case with the reference's prompt text, pixel bounds and
token count, f32 on the CPU, EOS ignored, and keeps BIN's command line and log in OURS/case-<i>.log) and checks:

* the screenshot is the one the reference used (sha256), and the prompt length equals len(input_ids);
* the generated ids equal the reference's, step by step. A step whose reference top-1/top-2 logit gap is below
  --flip-gap may pick the other token (both engines are within f32 rounding of a tie); the steps after such a
  flip are not compared, since the two continuations differ from then on;
* each compared step's top-5 log-probs: for every token id in both top-5 lists |Δ| <= --tol, and the ids of the
  reference's top 5 appear in ours except where the reference's 5th and 6th could swap (an id missing from ours
  is reported and fails only when it is not the reference's 5th).

Prints one table row per step and a summary line per case; exits 1 on a failure, 2 on unusable input.
Python 3.11 or later, standard library only.

Usage (from the repository root):

    python3 benches/compare/qwen3_parity_check.py /tmp/q3-parity-2b/parity.json \
        --ours benches/results/DATE-qwen3-parity/ours --run target/release/mobile-r1-eval
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def unusable(message):
    """Stops with exit status 2 (a failed comparison exits 1)."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def load_json(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        unusable(f"{what} {path}: {e}")


def image_path(case):
    """The reference stores the screenshot relative to the repository root it ran in."""
    path = os.path.normpath(os.path.join(ROOT, case["image"]))
    if not os.path.isfile(path):
        unusable(f"screenshot {path} (from parity.json) not found")
    if sha256(path) != case["image_sha256"]:
        unusable(f"screenshot {path} differs from the one in parity.json (sha256)")
    return path


def run_case(binary, ref, case, model, out_path, extra):
    cmd = [binary, "generate", "--json", "--model", model, "--image", image_path(case), "--prompt", case["text"],
           "--min-pixels", str(ref["min_pixels"]), "--max-pixels", str(ref["max_pixels"]),
           "--max-new-tokens", str(len(case["generated_ids"])), "--ignore-eos", "--dtype", "f32",
           "--device", "cpu"] + extra
    print("$ " + " ".join(cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        unusable(f"{binary} exited with {done.returncode}")
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(done.stdout)
    with open(out_path[:-len(".json")] + ".log", "w", encoding="utf-8") as f:
        f.write(" ".join(cmd) + "\n" + done.stderr)


def compare_step(ref_ids, ref_lps, ours_row, tol):
    """Returns (max |Δ logprob| over the shared ids, problems)."""
    ours = {int(tid): float(lp) for tid, lp in ours_row}
    worst, problems = 0.0, []
    for rank, (tid, lp) in enumerate(zip(ref_ids, ref_lps)):
        if tid not in ours:
            if rank < len(ref_ids) - 1:
                problems.append(f"reference rank-{rank + 1} id {tid} not in our top 5")
            continue
        delta = abs(ours[tid] - lp)
        worst = max(worst, delta)
        if delta > tol:
            problems.append(f"id {tid}: |Δ logprob| {delta:.3g} > {tol:g}")
    return worst, problems


def check_case(i, case, ours, tol, flip_gap):
    """Prints the case's table; returns (failures, max |Δ|, steps compared)."""
    failures = []
    if ours.get("prompt_tokens") != len(case["input_ids"]):
        failures.append(f"prompt length {ours.get('prompt_tokens')} != reference {len(case['input_ids'])} "
                        f"(grid {case['image_grid_thw']}, {case['n_image_tokens']} image tokens)")
    ref_gen, our_gen = case["generated_ids"], ours.get("token_ids", [])
    rows = ours.get("top_logprobs", [])
    if len(our_gen) != len(ref_gen) or len(rows) != len(ref_gen):
        failures.append(f"{len(our_gen)} tokens / {len(rows)} top-5 rows, reference {len(ref_gen)}")
    print(f"case {i}: {case['image']} grid {case['image_grid_thw']} prompt {len(case['input_ids'])} tokens")
    print(f"  {'step':>4} {'ref id':>7} {'our id':>7} {'gap':>8} {'max|Δlp|':>10}  note")
    worst, compared = 0.0, 0
    for step in range(min(len(ref_gen), len(our_gen), len(rows))):
        gap = case["top1_top2_logit_gaps"][step]
        d, problems = compare_step(case["step_top5_ids"][step], case["step_top5_logprobs"][step], rows[step], tol)
        worst, compared = max(worst, d), compared + 1
        note = "; ".join(problems)
        if problems:
            failures.append(f"step {step}: {note}")
        flipped = ref_gen[step] != our_gen[step]
        if flipped:
            note = (note + "; " if note else "") + ("near-tie flip, later steps not compared" if gap < flip_gap
                                                     else "TOKEN MISMATCH")
        print(f"  {step:>4} {ref_gen[step]:>7} {our_gen[step]:>7} {gap:>8.4f} {d:>10.3g}  {note}")
        if flipped:
            if gap >= flip_gap:
                failures.append(f"step {step}: token {our_gen[step]} != reference {ref_gen[step]} (gap {gap:.4g})")
            break
    return failures, worst, compared


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parity", help="OUT/parity.json from qwen3_parity.py")
    ap.add_argument("--ours", required=True, help="folder of case-<i>.json (`generate --json` outputs)")
    ap.add_argument("--run", metavar="BIN", help="run this mobile-r1-eval binary first to write --ours")
    ap.add_argument("--model", help="checkpoint for --run (default: the parity.json's, next to it)")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest |Δ logprob| allowed")
    ap.add_argument("--flip-gap", type=float, default=1e-3,
                    help="a reference top-1/top-2 logit gap below this lets the token flip")
    ap.add_argument("extra", nargs="*", help="after --: more flags for BIN (e.g. --kernels off)")
    args = ap.parse_args()
    ref = load_json(args.parity, "reference")
    if ref.get("schema_version") != 1:
        unusable(f"{args.parity}: schema_version {ref.get('schema_version')}, expected 1")
    if args.run:
        model = args.model or os.path.join(os.path.dirname(os.path.abspath(args.parity)), ref["model"])
        os.makedirs(args.ours, exist_ok=True)
        for i, case in enumerate(ref["cases"]):
            run_case(args.run, ref, case, model, os.path.join(args.ours, f"case-{i}.json"), args.extra)
    failed, summary = False, []
    for i, case in enumerate(ref["cases"]):
        ours = load_json(os.path.join(args.ours, f"case-{i}.json"), "our output")
        failures, worst, compared = check_case(i, case, ours, args.tol, args.flip_gap)
        for f in failures:
            print(f"  FAIL {f}")
        failed |= bool(failures)
        summary.append(f"case {i}: {'FAIL' if failures else 'ok'}, {compared}/{len(case['generated_ids'])} steps "
                       f"compared, max |Δ logprob| {worst:.3g}")
    print("\n".join(summary))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
