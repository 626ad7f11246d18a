#!/usr/bin/env bash
# bf16 against f32 and against the build before the AMX kernel, `bench` at max_pixels 250,880 (prefill-heavy) and
# at 50,176 with 32 new tokens (decode against the bandwidth bound), alternated, two rounds.
#   bash ab.sh BASE_BINARY NEW_BINARY OUT_DIR
set -euo pipefail
base=$1 new=$2 out=$3
prefill=(bench --config small --steps 1 --batch-size 1 --max-new-tokens 2 --max-pixels 250880 --no-judge --json)
decode=(bench --config small --steps 1 --batch-size 1 --max-new-tokens 32 --max-pixels 50176 --no-judge --json)
for round in 1 2; do
    "$new" "${prefill[@]}" --dtype f32 > "$out/bench-prefill-f32-new-r$round.json"
    "$new" "${prefill[@]}" --dtype bf16 > "$out/bench-prefill-bf16-new-r$round.json"
    "$base" "${prefill[@]}" --dtype bf16 > "$out/bench-prefill-bf16-base-r$round.json"
    "$new" "${decode[@]}" --dtype bf16 > "$out/bench-decode-bf16-new-r$round.json"
done
