#!/usr/bin/env bash
# `serve` on the CPU beside a local `eval` of the same step prompts, with the random `small` checkpoint of
# benches/compare/compare.py (Qwen2.5-0.5B text dimensions, the real 3B vision tower, f32): prompts/s, p50/p99
# latency at 1, 8 and 32 concurrent clients, `serve`'s batch occupancy from /metrics and peak RSS of every process
# (benches/gpu/serve_bench.sh does the runs), plus the commit, the CPU and its vector flags, the binary and the
# load before and after, in $OUT/env.txt.
#
#   PYTHON=.venv-fixtures/bin/python BIN=target/release/mobile-r1-eval OUT=serve-cpu bash benches/serve/serve_cpu.sh
#
# Settings (environment): MODEL and DATA (a checkpoint and a benchmark folder; unset: written with $PYTHON, which
# needs PyTorch and transformers), STEPS (32, enough for 32 clients at once), MAX_PIXELS (200704: 256 image
# tokens), MAX_NEW_TOKENS (4), CLIENTS ("1 8 32"), BATCH (32). On a shared machine run it alone, e.g. under
# `flock /tmp/measure.lock`.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/mobile-r1-eval}
OUT=${OUT:-target/serve-cpu}
PYTHON=${PYTHON:-python3}
STEPS=${STEPS:-32} MAX_PIXELS=${MAX_PIXELS:-200704} MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-4}
CLIENTS=${CLIENTS:-1 8 32} BATCH=${BATCH:-32}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [ -z "${MODEL:-}" ]; then
  MODEL=${WORK_CKPT:-/tmp/mre-serve-cpu}/small-ckpt DATA=${WORK_CKPT:-/tmp/mre-serve-cpu}/data
  echo "== writing the random small checkpoint and $STEPS steps"
  "$PYTHON" - "$MODEL" "$DATA" "$STEPS" "$MAX_PIXELS" <<'PY' || exit 1
import sys
sys.path.insert(0, "benches/compare")
import compare
model, data, steps, max_pixels = sys.argv[1:]
fx = compare.fixtures_module()
compare.write_checkpoint(fx, "small", model, 1234, int(max_pixels), "cpu", "f32")
compare.write_benchmark(fx, data, int(steps))
PY
fi

{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "binary: $BIN ($("$BIN" --version 2>/dev/null))"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) threads"
  echo "vector flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|avx2|fma|f16c|avx512f|avx512bw|avx512_bf16|avx512_vnni|amx_tile)$' | tr '\n' ' ')"
  echo "settings: $(basename "$MODEL") f32, $STEPS steps, max_pixels $MAX_PIXELS, max_new_tokens $MAX_NEW_TOKENS, batch $BATCH, clients $CLIENTS"
  echo "load before: $(uptime)"
} >"$OUT/env.txt"

BIN=$BIN OUT=$OUT MODEL=$MODEL DATA=${DATA:-} DEVICE=cpu DTYPE=f32 CLIENTS=$CLIENTS BATCH=$BATCH \
  MAX_PIXELS=$MAX_PIXELS MAX_NEW_TOKENS=$MAX_NEW_TOKENS VLLM=off WORK=${WORK:-/tmp/mre-serve-cpu-runs} \
  bash benches/gpu/serve_bench.sh
status=$?
echo "load after: $(uptime)" >>"$OUT/env.txt"
cat "$OUT/env.txt"
exit $status
