#!/usr/bin/env bash
# GPU checks and timings in one run, for a machine with an NVIDIA GPU, CUDA 13 libraries and PyTorch +
# transformers (no Rust toolchain needed): build the binary elsewhere with the `cuda` feature (README,
# "The two commands"; .ci/cuda-check.sh has a recipe that needs no CUDA install) and point BIN at it.
#
#   BIN=path/to/mobile-r1-eval OUT=gpu-results bash benches/gpu/gpu_checks.sh [full|quick|kernels|profile|mma]
#
# `quick` stops after step 2; `kernels` runs steps 2, 6, 3, 4 and 7's profiled bench; `profile` runs only step 7;
# `mma` runs step 8; `lease` runs benches/gpu/lease.sh (correctness, then speed, by priority, within $BUDGET
# seconds: made for one call on a GPU machine lent for a few minutes).
#
# 1. correctness: the embedded sample benchmark through the tiny test checkpoint on CPU and on CUDA (f32 at batch
#    sizes 1, 3 and 8; bf16 at 1 and 8), predictions compared token for token (benches/gpu/compare_runs.py);
# 2. the project's CUDA kernels against their CPU references (`mobile-r1-eval self-test --device cuda`);
# 3. `bench --config 3b --device cuda` (bf16): steps/s, MFU, memory, judge phase;
# 4. benches/compare/compare.py on the GPU, `3b` in bf16 against transformers (steps/s, peak GPU memory);
# 5. the bench again with MOBILE_R1_EVAL_KERNELS=off (candle's ops only), to measure what the kernels bring;
# 6. compare.py with `small` in f32 (identical tokens required);
# 7. (`profile` only) where the time goes: the 3b bench without the judge, with the kernels off, and with the
#    per-section profiler (MOBILE_R1_EVAL_PROFILE=1).
# 8. (`mma` only) the tensor-core varlen attention (MOBILE_R1_EVAL_MMA=1; the default since it passed there):
#    self-test
#    (its cases are labelled `varlen mma`), CPU vs CUDA f32 tokens on the sample (the other new kernels end to end),
#    the sample through the tiny checkpoint in bf16 with and without it
#    (agreement counted), the 3b bench without and with it, its profile, and compare.py 3b bf16 with it; last,
#    the `small` f32 bench with the profiler, to find the f32 slowdown noted in benches/results/2026-11-30-h200/README.md.
# Every stage has its own time limit and its log in $LOGS; a failed stage does not stop the later ones. After
# each stage, $OUT/gpu-checks.tgz holds every log and result so far.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/mobile-r1-eval}
OUT=${OUT:-target/gpu-checks}
MODE=${1:-full}
WORK=${WORK:-/tmp/mre-gpu}
LOGS=$WORK/logs
mkdir -p "$OUT" "$LOGS"
export RUST_LOG=${RUST_LOG:-warn} PYTHONUNBUFFERED=1

# The CUDA runtime libraries the binary links (cuBLAS 13, cuRAND 10, cudart 13) from PyPI wheels of PyTorch's,
# when the system has none.
libs=$(python3 - <<'PY'
import glob, os, site, sys
dirs = set()
for root in site.getsitepackages() + [p for p in sys.path if p.endswith("site-packages")]:
    for pat in ("libcublas.so.*", "libcublasLt.so.*", "libcurand.so.*", "libcudart.so.*", "libnvrtc.so.*"):
        dirs.update(os.path.dirname(p) for p in glob.glob(os.path.join(root, "nvidia", "**", pat), recursive=True))
print(":".join(sorted(dirs)))
PY
)
export LD_LIBRARY_PATH=${libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
stage() {  # stage NAME SECONDS CMD...: run (functions too) with a limit, log to $OUT/NAME.log, report its status
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi  # ONLY="stage …": just those
  if [ -n "${DEADLINE:-}" ]; then  # a whole-run deadline: shorten the stage to fit, skip it when too little is left
    local left=$((DEADLINE - SECONDS))
    if [ "$left" -lt 20 ]; then echo "== $name: skipped, ${left} s left of the run"; return; fi
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  timeout "$limit" bash -c '"$@"' _ "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc, $((SECONDS - t0)) s"
  tail -n "${TAIL:-12}" "$LOGS/$name.log"
  tar -czf "$OUT/gpu-checks.tgz" -C "$WORK" logs
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
ldd "$BIN" | grep -i "not found"

bench3b() { "$BIN" bench --config 3b --device cuda --dtype bf16 --steps "$1" --batch-size 64 \
  --tokenizer tests/fixtures/tokenizer --json "${@:2}"; }
export M=tests/fixtures/models/tiny-a
# eval_cmd NAME DEVICE DTYPE BATCH sets the caller's `cmd` to the sample's eval into $WORK/NAME (which resumes a run
# already there); run_eval NAME DEVICE DTYPE BATCH runs it afresh.
eval_cmd() {
  cmd=("$BIN" eval --model "$M" --out "$WORK/$1" --device "$2" --dtype "$3" --batch-size "$4" --max-new-tokens 24
    --max-pixels 1003520)
}
run_eval() { local cmd; eval_cmd "$@"; rm -rf "${WORK:?}/$1"; "${cmd[@]}"; }
export -f bench3b eval_cmd run_eval
export BIN WORK
if [ "$MODE" = lease ]; then
  . benches/gpu/lease.sh
  exit 0
fi
if [ "$MODE" = mma ]; then
  export MOBILE_R1_EVAL_MMA=off  # the CUDA-core attention, against which the stages below set it on
  TAIL=70 stage self_test 60 "$BIN" self-test --device cuda
  # The new kernels end to end: CUDA f32 must give the CPU's tokens (as it did before them).
  TAIL=3 stage eval_cpu 90 run_eval cpu cpu f32 8
  TAIL=3 stage eval_cuda_f32_b8 60 run_eval cuda_f32_b8 cuda f32 8
  stage same_tokens_f32 30 python3 benches/gpu/compare_runs.py "$WORK" cpu cuda_f32_b8
  TAIL=3 stage eval_cuda_bf16_b8 60 run_eval cuda_bf16_b8 cuda bf16 8
  TAIL=3 stage eval_cuda_bf16_b8_mma 60 env MOBILE_R1_EVAL_MMA=1 bash -c 'run_eval cuda_bf16_b8_mma cuda bf16 8'
  stage agreement_mma 30 python3 benches/gpu/compare_runs.py "$WORK" cuda_bf16_b8 -- cuda_bf16_b8_mma
  stage bench_3b 100 bench3b 128
  stage bench_3b_mma 100 env MOBILE_R1_EVAL_MMA=1 bash -c 'bench3b 128'
  stage bench_3b_mma_profile 100 env MOBILE_R1_EVAL_MMA=1 MOBILE_R1_EVAL_PROFILE=1 bash -c 'bench3b 64'
  stage compare_3b_bf16_mma 180 env MOBILE_R1_EVAL_MMA=1 python3 benches/compare/compare.py --preset 3b \
    --device cuda --dtype bf16 --steps 64 --batch 32 --max-pixels 1003520 --binary "$BIN" --work "$WORK/cmp-3b" \
    --json-out "$LOGS/compare_3b_mma.json"
  stage bench_small_f32_profile 100 env MOBILE_R1_EVAL_PROFILE=1 "$BIN" bench --config small \
    --device cuda --dtype f32 --steps 8 --batch-size 8 --no-judge --tokenizer tests/fixtures/tokenizer --json
  exit 0
fi
if [ "$MODE" = kernels ]; then  # the kernels, then speed and parity with transformers (steps 2, 6, 3, 4)
  TAIL=45 stage self_test 60 "$BIN" self-test --device cuda
  stage compare_small_f32 90 python3 benches/compare/compare.py --preset small --device cuda --dtype f32 \
    --steps 8 --batch 8 --max-pixels 1003520 --binary "$BIN" --work "$WORK/cmp-small" --json-out "$LOGS/compare_small.json"
  stage bench_3b 90 bench3b 128
  stage compare_3b_bf16 150 python3 benches/compare/compare.py --preset 3b --device cuda --dtype bf16 \
    --steps 64 --batch 32 --max-pixels 1003520 --binary "$BIN" --work "$WORK/cmp-3b" --json-out "$LOGS/compare_3b.json"
  stage bench_3b_profile 90 env MOBILE_R1_EVAL_PROFILE=1 bash -c 'bench3b 64'
  exit 0
fi
if [ "$MODE" = profile ]; then
  stage bench_3b_nojudge 90 bench3b 64 --no-judge
  stage bench_3b_kernels_off 90 env MOBILE_R1_EVAL_KERNELS=off bash -c 'bench3b 64 --no-judge'
  stage bench_3b_profile 120 env MOBILE_R1_EVAL_PROFILE=1 bash -c 'bench3b 64'
  exit 0
fi

TAIL=3 stage eval_cpu 90 run_eval cpu cpu f32 8
for b in 1 3 8; do TAIL=3 stage "eval_cuda_f32_b$b" 60 run_eval "cuda_f32_b$b" cuda f32 "$b"; done
for b in 1 8; do TAIL=3 stage "eval_cuda_bf16_b$b" 60 run_eval "cuda_bf16_b$b" cuda bf16 "$b"; done
stage same_tokens 60 python3 benches/gpu/compare_runs.py "$WORK" cpu cuda_f32_b1 cuda_f32_b3 cuda_f32_b8 \
  -- cuda_bf16_b1 cuda_bf16_b8
TAIL=40 stage self_test 60 "$BIN" self-test --device cuda
cp "$WORK"/cuda_f32_b8/throughput.json "$LOGS/eval_cuda_throughput.json" 2>/dev/null
[ "$MODE" = quick ] && exit 0

stage bench_3b 150 bench3b 128
stage compare_3b_bf16 200 python3 benches/compare/compare.py --preset 3b --device cuda --dtype bf16 \
  --steps 64 --batch 32 --max-pixels 1003520 --binary "$BIN" --work "$WORK/cmp-3b" --json-out "$LOGS/compare_3b.json"
stage bench_3b_kernels_off 120 env MOBILE_R1_EVAL_KERNELS=off bash -c 'bench3b 64'
stage compare_small_f32 120 python3 benches/compare/compare.py --preset small --device cuda --dtype f32 \
  --steps 8 --batch 8 --max-pixels 1003520 --binary "$BIN" --work "$WORK/cmp-small" --json-out "$LOGS/compare_small.json"
