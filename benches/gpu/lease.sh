# Sourced by `gpu_checks.sh lease` (its stage, eval_cmd, run_eval, bench3b, $BIN, $WORK, $LOGS and $M): every
# GPU check of the build in one call on a machine lent for a few minutes, by priority, inside $BUDGET seconds
# (default 540):
#
# 1. correctness: self-test; the embedded sample through the tiny Qwen2.5-VL checkpoint on the CPU and on CUDA
#    (f32 token for token; `--device auto` and `cuda:0`; bf16 at batch 1 and 16, with tensor-core attention
#    and on CUDA cores, counted); a CUDA run interrupted by SIGINT and resumed (no step lost or doubled, the
#    uninterrupted run's answers); the same for the tiny Qwen3-VL checkpoint;
# 2. speed: `bench --config 3b` with tensor-core attention and on CUDA cores, its profile, compare.py `3b`
#    bf16 against transformers, the `small` f32 and `qwen3-tiny` f32 parity against transformers (tokens and
#    top-5 log-probs), a Qwen3-VL 4B bench row, the several-device path on one GPU (`cuda:0,cuda:0`) and `serve`
#    under clients.
# ONLY="stage …" (the stage names below) runs just those.
DEADLINE=$((SECONDS + ${BUDGET:-540}))
export M3=tests/fixtures/models/qwen3-tiny-a
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}  # wheels kit.sh --unpack installed
"$BIN" --version

run_eval3() { M=$M3 run_eval "$@"; }
# Every run's device and tensor-core attention as its manifest records them.
manifests() {
  for d in "$WORK"/*/manifest.json; do
    python3 - "$d" <<'PY'
import json, os, sys
m = json.load(open(sys.argv[1]))
b = m.get("backend", {})
run = os.path.basename(os.path.dirname(sys.argv[1]))
print(run, b.get("device"), json.dumps(b.get("ops", {}).get("tensor_core_attention")))
PY
  done
}
# The bf16 batch-1 CUDA run again, stopped by SIGINT after its third answer and resumed with the same command:
# every step once, and the uninterrupted run's answers.
interrupt_resume() {
  local d=$WORK/cuda_bf16_b1_resumed i cmd
  eval_cmd cuda_bf16_b1_resumed cuda:0 bf16 1
  rm -rf "$d"
  "${cmd[@]}" &  # the program itself, so that the signal reaches it
  local pid=$!
  for i in $(seq 1200); do
    [ "$(cat "$d/predictions.jsonl" 2>/dev/null | wc -l)" -ge 3 ] && break
    sleep 0.05
  done
  kill -INT "$pid"
  wait "$pid"
  echo "interrupted: rc=$? with $(wc -l <"$d/predictions.jsonl") answers saved"
  "${cmd[@]}"
  echo "resumed: rc=$?"
  python3 - "$d/predictions.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
keys = [(r["trajectory"], r["step"]) for r in rows]
print(f"{len(rows)} lines, {len(set(keys))} distinct steps")
sys.exit(0 if len(rows) == len(set(keys)) == 30 else 1)
PY
  python3 benches/gpu/compare_runs.py "$WORK" cuda_bf16_b1 cuda_bf16_b1_resumed
}
export -f run_eval3 manifests interrupt_resume

TAIL=80 stage self_test 60 "$BIN" self-test --device cuda
TAIL=3 stage eval_cpu 60 run_eval cpu cpu f32 8
TAIL=3 stage eval_cuda_f32_b8 45 run_eval cuda_f32_b8 cuda f32 8
TAIL=3 stage eval_auto_f32_b8 45 run_eval auto_f32_b8 auto f32 8
TAIL=3 stage eval_cuda0_bf16_b1 45 run_eval cuda_bf16_b1 cuda:0 bf16 1
TAIL=3 stage eval_cuda_bf16_b16 45 run_eval cuda_bf16_b16 cuda bf16 16
TAIL=3 stage eval_cuda_bf16_b16_cuda_cores 45 env MOBILE_R1_EVAL_MMA=off \
  bash -c 'run_eval cuda_bf16_b16_cuda_cores cuda bf16 16'
TAIL=20 stage same_tokens 20 python3 benches/gpu/compare_runs.py "$WORK" cpu cuda_f32_b8 auto_f32_b8 \
  -- cuda_bf16_b1 cuda_bf16_b16 cuda_bf16_b16_cuda_cores
TAIL=20 stage bf16_agreement 20 python3 benches/gpu/compare_runs.py "$WORK" cuda_bf16_b1 \
  -- cuda_bf16_b16 cuda_bf16_b16_cuda_cores
stage interrupt_resume 60 interrupt_resume
TAIL=3 stage q3_eval_cpu 60 run_eval3 q3_cpu cpu f32 8
TAIL=3 stage q3_eval_cuda_f32_b8 45 run_eval3 q3_cuda_f32_b8 cuda f32 8
TAIL=3 stage q3_eval_cuda_bf16_b1 45 run_eval3 q3_cuda_bf16_b1 cuda bf16 1
TAIL=3 stage q3_eval_cuda_bf16_b16 45 run_eval3 q3_cuda_bf16_b16 cuda bf16 16
TAIL=20 stage q3_same_tokens 20 python3 benches/gpu/compare_runs.py "$WORK" q3_cpu q3_cuda_f32_b8 \
  -- q3_cuda_bf16_b1 q3_cuda_bf16_b16
TAIL=20 stage manifests 20 manifests
cp "$WORK"/cuda_f32_b8/throughput.json "$LOGS/eval_cuda_throughput.json" 2>/dev/null

stage bench_3b 90 bench3b 128
stage bench_3b_cuda_cores 90 env MOBILE_R1_EVAL_MMA=off bash -c 'bench3b 128'
stage bench_3b_profile 60 env MOBILE_R1_EVAL_PROFILE=1 bash -c 'bench3b 64 --no-judge'
TAIL=30 stage compare_3b_bf16 180 python3 benches/compare/compare.py --preset 3b --device cuda --dtype bf16 \
  --steps 64 --batch 32 --max-pixels 1003520 --no-logprobs --binary "$BIN" --work "$WORK/cmp-3b" \
  --json-out "$LOGS/compare_3b.json"
TAIL=30 stage compare_small_f32 120 python3 benches/compare/compare.py --preset small --device cuda --dtype f32 \
  --steps 8 --batch 8 --max-pixels 1003520 --binary "$BIN" --work "$WORK/cmp-small" \
  --json-out "$LOGS/compare_small.json"
stage bench_q3_4b 90 "$BIN" bench --config qwen3-4b --device cuda --dtype bf16 --steps 128 --batch-size 64 --json
TAIL=30 stage compare_q3_tiny_f32 60 python3 benches/compare/compare.py --preset qwen3-tiny --device cuda \
  --dtype f32 --steps 8 --batch 8 --max-pixels 1003520 --binary "$BIN" --work "$WORK/cmp-q3" \
  --json-out "$LOGS/compare_q3_tiny.json"
stage bench_3b_two_copies 60 "$BIN" bench --config 3b --device cuda:0,cuda:0 --dtype bf16 --steps 64 \
  --batch-size 32 --no-judge --json
TAIL=30 stage serve_bench 150 env MODEL="$WORK/cmp-3b/3b-ckpt" DATA="$WORK/cmp-3b/data" CLIENTS="8 64" \
  BATCH=32 MAX_NEW_TOKENS=16 WORK="$WORK/serve" OUT="$LOGS/serve" bash benches/gpu/serve_bench.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >"$LOGS/nvidia-smi.csv"
tar -czf "$OUT/gpu-checks.tgz" -C "$WORK" logs
