#!/usr/bin/env bash
# `serve` under concurrent clients, beside a local `eval` of the same step prompts, and the same client against
# vLLM where vLLM is installed: prompts/s, latency percentiles, batch occupancy and how many answers equal the
# local run's. Made for a GPU machine (no Rust toolchain needed: build the binary elsewhere with the `cuda`
# feature, .ci/cuda-check.sh has a recipe); it runs anywhere the binary runs.
#
#   BIN=path/to/mobile-r1-eval OUT=serve-results bash benches/gpu/serve_bench.sh
#   MODEL=tests/fixtures/models/tiny-a DEVICE=cpu DTYPE=f32 CLIENTS="1 4" BATCH=4 bash benches/gpu/serve_bench.sh
#
# Settings (environment):
#   MODEL           a checkpoint folder; unset: write compare.py's random checkpoint $PRESET (default 3b) with
#                   PyTorch + transformers on $DEVICE, and $STEPS synthetic 1080x2400 steps (default 128) beside it
#   DATA            with MODEL: a benchmark folder (default: the embedded sample)
#   DEVICE, DTYPE   cuda, bf16
#   CLIENTS         "1 8 32 64": the `--concurrency` of each client run against `serve`
#   BATCH           64: `--batch-size` of the local run and of `serve`
#   MAX_PIXELS      1003520; MAX_NEW_TOKENS 64
#   VLLM            auto (run it when `python3 -c "import vllm"` works) or off
#
# Peak RSS (GNU time, and serve's VmHWM read and reset after each client run) is recorded where Linux allows it.
# Every run is a run folder under $WORK; $OUT/serve-bench.json and serve-bench.txt hold the summary, and
# $OUT/serve-bench.tgz every log, manifest, throughput.json and /metrics scrape. One `serve` answers every client
# run in turn, so the batch occupancy read from /metrics after a run counts all requests since it started.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/mobile-r1-eval}
OUT=${OUT:-target/serve-bench}
WORK=${WORK:-/tmp/mre-serve-bench}
DEVICE=${DEVICE:-cuda} DTYPE=${DTYPE:-bf16} PRESET=${PRESET:-3b} STEPS=${STEPS:-128}
CLIENTS=${CLIENTS:-1 8 32 64} BATCH=${BATCH:-64} MAX_PIXELS=${MAX_PIXELS:-1003520}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-64} VLLM=${VLLM:-auto}
LOGS=$WORK/logs
rm -rf "$WORK"
mkdir -p "$OUT" "$LOGS"
OUT=$(cd "$OUT" && pwd)
export RUST_LOG=${RUST_LOG:-warn}

if [ -z "${MODEL:-}" ]; then
  MODEL=$WORK/$PRESET-ckpt DATA=$WORK/data
  echo "== writing the random $PRESET checkpoint and $STEPS steps"
  python3 - "$PRESET" "$MODEL" "$DATA" "$STEPS" "$MAX_PIXELS" "$DEVICE" "$DTYPE" <<'PY' || exit 1
import sys
sys.path.insert(0, "benches/compare")
import compare
preset, model, data, steps, max_pixels, device, dtype = sys.argv[1:]
fx = compare.fixtures_module()
compare.write_checkpoint(fx, preset, model, 1234, int(max_pixels), device, dtype)
compare.write_benchmark(fx, data, int(steps))
PY
fi
data_flag=(${DATA:+--data "$DATA"})
common=(--max-pixels "$MAX_PIXELS" --max-new-tokens "$MAX_NEW_TOKENS" --no-judge "${data_flag[@]}")

wait_for() {  # wait_for SECONDS CMD...: poll CMD once a second until it succeeds
  local i
  for ((i = 0; i < $1; i++)); do "${@:2}" >/dev/null 2>&1 && return 0; sleep 1; done
  return 1
}
scrape() { python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "$1"; }
# peak resident memory in kB of the command it runs, into $LOGS/NAME.rss (GNU time, where installed)
peak() { local name=$1; shift; if [ -x /usr/bin/time ]; then /usr/bin/time -f %M -o "$LOGS/$name.rss" "$@"; else "$@"; fi; }
# serve's peak resident memory in kB since the last call, into $LOGS/serve-NAME.rss; the peak is then reset
serve_peak() {
  awk '/^VmHWM/ {print $2}' "/proc/$serve_pid/status" >"$LOGS/serve-$1.rss" 2>/dev/null
  echo 5 >"/proc/$serve_pid/clear_refs" 2>/dev/null
}
client() {  # client NAME ENDPOINT CONCURRENCY: the step prompts through `eval --backend openai`
  echo "== $1"
  peak "$1" "$BIN" eval --backend openai --endpoint "$2" --api-model bench --model "$MODEL" --concurrency "$3" \
    --request-timeout 900 "${common[@]}" --out "$WORK/$1" >"$LOGS/$1.out" 2>"$LOGS/$1.log"
  echo "   rc=$?"
}

echo "== local: eval --device $DEVICE --dtype $DTYPE --batch-size $BATCH"
peak local "$BIN" eval --model "$MODEL" --device "$DEVICE" --dtype "$DTYPE" --batch-size "$BATCH" "${common[@]}" \
  --out "$WORK/local" >"$LOGS/local.out" 2>"$LOGS/local.log"
echo "   rc=$?"

echo "== serve"
"$BIN" serve --model "$MODEL" --device "$DEVICE" --dtype "$DTYPE" --batch-size "$BATCH" --port 0 \
  --max-pixels "$MAX_PIXELS" --max-new-tokens "$MAX_NEW_TOKENS" --max-queue 1024 --served-model-name bench \
  >"$LOGS/serve.out" 2>"$LOGS/serve.log" &
serve_pid=$!
if wait_for 900 grep -q "listening on" "$LOGS/serve.out"; then
  url=$(grep -o 'http://[^ ]*/v1' "$LOGS/serve.out" | head -1)
  serve_peak start
  for c in $CLIENTS; do
    client "serve-c$c" "$url" "$c"
    scrape "${url%/v1}/metrics" >"$LOGS/metrics-serve-c$c.txt" 2>&1
    serve_peak "serve-c$c"
  done
else
  echo "   serve did not start:"; tail -5 "$LOGS/serve.log"
fi
kill -TERM "$serve_pid" 2>/dev/null
wait "$serve_pid"
echo "   serve exited with $?"

if [ "$VLLM" != off ] && python3 -c "import vllm" 2>/dev/null; then
  echo "== vLLM"
  python3 -m vllm.entrypoints.openai.api_server --model "$MODEL" --served-model-name bench --port 8011 \
    --dtype "$([ "$DTYPE" = bf16 ] && echo bfloat16 || echo float32)" --limit-mm-per-prompt '{"image": 2}' \
    --mm-processor-kwargs "{\"min_pixels\": 3136, \"max_pixels\": $MAX_PIXELS}" --max-model-len 8192 \
    >"$LOGS/vllm.log" 2>&1 &
  vllm_pid=$!
  if wait_for 900 scrape http://127.0.0.1:8011/health; then
    last=${CLIENTS##* }
    client "vllm-c$last" http://127.0.0.1:8011/v1 "$last"
  else
    echo "   vLLM did not start:"; tail -5 "$LOGS/vllm.log"
  fi
  kill -TERM "$vllm_pid" 2>/dev/null
  wait "$vllm_pid"
else
  echo "== vLLM: not installed here (or VLLM=off)"
fi

python3 - "$WORK" "$OUT" "$MODEL" "$DEVICE" "$DTYPE" <<'PY'
import glob, json, os, sys
work, out, model, device, dtype = sys.argv[1:]

def answers(run):
    p = os.path.join(work, run, "predictions.jsonl")
    if not os.path.exists(p):
        return {}
    rows = (json.loads(l) for l in open(p, encoding="utf-8") if l.strip())
    return {(r["trajectory"], r["step"]): r.get("response") for r in rows}

local = answers("local")
runs = []
served = glob.glob(os.path.join(work, "serve-c*")) + glob.glob(os.path.join(work, "vllm-c*"))
for run in ["local"] + sorted((os.path.basename(d) for d in served), key=lambda r: (r[0], int(r.split("-c")[1]))):
    tp = os.path.join(work, run, "throughput.json")
    if not os.path.exists(tp):
        runs.append({"run": run, "error": "no throughput.json (see its log)"})
        continue
    phase = json.load(open(tp))["phases"][0]
    req = phase.get("requests") or {}
    mine = answers(run)
    runs.append({
        "run": run, "prompts": phase["prompts"], "errors": phase["errors"], "wall_seconds": phase["wall_seconds"],
        "prompts_per_second": phase["prompts"] / max(phase["wall_seconds"], 1e-9),
        "latency_seconds": req.get("latency_seconds"), "retries": req.get("retries"),
        "same_answer_as_local": sum(mine.get(k) == v for k, v in local.items()), "of": len(local),
    })
def rss_mib(name):
    p = os.path.join(work, "logs", f"{name}.rss")
    try:
        return round(int(open(p).read().split()[-1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        return None

for run in runs:
    # peak RSS of the run's own process (the client, for a served run) and of `serve` during the run
    for key, name in (("peak_rss_mib", run["run"]), ("serve_peak_rss_mib", f"serve-{run['run']}")):
        if rss_mib(name) is not None:
            run[key] = rss_mib(name)
    scrape = os.path.join(work, "logs", f"metrics-{run['run']}.txt")
    if os.path.exists(scrape):
        for line in open(scrape):
            if line.startswith(("mobile_r1_eval_batch_occupancy_peak", "mobile_r1_eval_batch_occupancy_mean")):
                name, value = line.split()
                run[name.removeprefix("mobile_r1_eval_")] = float(value)
summary = {"model": model, "device": device, "dtype": dtype, "runs": runs}
json.dump(summary, open(os.path.join(out, "serve-bench.json"), "w"), indent=2)
with open(os.path.join(out, "serve-bench.txt"), "w") as f:
    for r in runs:
        lat = r.get("latency_seconds") or {}
        f.write(f"{r['run']:>12}  " + ("  ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                for k, v in r.items() if k not in ("run", "latency_seconds")))
                + (f"  p50 {lat.get('p50', 0):.3g} s  p99 {lat.get('p99', 0):.3g} s" if lat else "") + "\n")
print(open(os.path.join(out, "serve-bench.txt")).read(), end="")
PY
tar -czf "$OUT/serve-bench.tgz" -C "$WORK" --exclude='*-ckpt' --exclude=data --exclude=report --exclude='*.png' .
