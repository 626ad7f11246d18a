#!/usr/bin/env bash
# Two builds side by side in bf16 at the compare's max_pixels (1,003,520: a 1080 x 2400 screenshot's 5,088
# patches), one step of 2 new tokens, alternated, three rounds; then the new build in f32 once (peak RSS, speed).
#   bash ab.sh BASE_BINARY NEW_BINARY OUT_DIR
set -euo pipefail
base=$1 new=$2 out=$3
args=(bench --config small --steps 1 --batch-size 1 --max-new-tokens 2 --max-pixels 1003520 --no-judge --json)
for round in 1 2 3; do
    "$base" "${args[@]}" --dtype bf16 > "$out/bench-bf16-base-r$round.json"
    "$new" "${args[@]}" --dtype bf16 > "$out/bench-bf16-new-r$round.json"
done
"$new" "${args[@]}" --dtype f32 > "$out/bench-f32-new-r1.json"
