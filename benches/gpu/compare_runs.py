#!/usr/bin/env python3
"""Compare the predictions of several `eval` run folders step by step.

    compare_runs.py WORK REF RUN... [-- LOOSE...]

Every RUN must hold exactly REF's responses (token-identical greedy outputs: same model, same dtype, other device
or batch size); exits 1 otherwise. LOOSE runs (another dtype) are only counted: how many steps match the first
LOOSE run (batch invariance within that dtype) and how many match REF.
"""
import json
import os
import sys


def responses(work, name):
    path = os.path.join(work, name, "predictions.jsonl")
    out = {}
    for line in open(path, encoding="utf-8"):
        row = json.loads(line)
        out[(row["trajectory"], row["step"])] = row["response"]
    return out


def same(a, b):
    return sum(a[k] == b.get(k) for k in a), len(a)


def main():
    work, ref, *rest = sys.argv[1:]
    strict, loose = (rest[: rest.index("--")], rest[rest.index("--") + 1:]) if "--" in rest else (rest, [])
    base = responses(work, ref)
    report, ok = {}, True
    for name in strict:
        n, total = same(base, responses(work, name))
        report[name] = f"{n}/{total} identical to {ref}"
        ok &= n == total and total > 0
    if loose:
        first = responses(work, loose[0])
        for name in loose:
            run = responses(work, name)
            report[name] = f"{same(first, run)[0]}/{len(first)} identical to {loose[0]}, " \
                           f"{same(base, run)[0]}/{len(base)} identical to {ref}"
    print(json.dumps(report, indent=1, ensure_ascii=False))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
