#!/usr/bin/env bash
# One binary in f32, the built-in GEMM (`--cpu-gemm off`: the gemm crate's AVX-512 kernels here) against a named
# library (`--cpu-gemm LIB`, MKL from .ci/mkl.sh) at the compare's max_pixels, one step of 2 new tokens,
# alternated, ROUNDS rounds (default 2).
#   bash ab-f32.sh BINARY LIB OUT_DIR [ROUNDS]
set -euo pipefail
bin=$1 lib=$2 out=$3 rounds=${4:-2}
args=(bench --config small --steps 1 --batch-size 1 --max-new-tokens 2 --max-pixels 1003520 --no-judge --json
      --dtype f32 --cpu-gemm-calibration none)
for round in $(seq 1 $rounds); do
    "$bin" "${args[@]}" --cpu-gemm off > "$out/bench-f32-builtin-r$round.json" 2>/dev/null
    "$bin" "${args[@]}" --cpu-gemm "$lib" > "$out/bench-f32-mkl-r$round.json" 2>/dev/null
done
