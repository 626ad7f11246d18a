#!/usr/bin/env bash
# One binary in bf16, the built-in kernels (`--cpu-gemm off`: AMX here) against a named library's bf16 GEMM
# (`--cpu-gemm LIB`, MKL from .ci/mkl.sh), at the compare's max_pixels (1,003,520), one step of 2 new tokens,
# alternated, ROUNDS rounds (default 3); then the kernels' timing test three times.
#   bash ab.sh BINARY LIB OUT_DIR [ROUNDS]
set -euo pipefail
bin=$1 lib=$2 out=$3 rounds=${4:-3}
args=(bench --config small --steps 1 --batch-size 1 --max-new-tokens 2 --max-pixels 1003520 --no-judge --json
      --dtype bf16 --cpu-gemm-calibration none)
for round in $(seq 1 $rounds); do
    "$bin" "${args[@]}" --cpu-gemm off > "$out/bench-bf16-builtin-r$round.json" 2>/dev/null
    "$bin" "${args[@]}" --cpu-gemm "$lib" > "$out/bench-bf16-mkl-r$round.json" 2>/dev/null
done
