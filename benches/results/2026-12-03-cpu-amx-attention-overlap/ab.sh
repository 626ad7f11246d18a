#!/usr/bin/env bash
# Two builds side by side in bf16 at the compare's max_pixels (1,003,520: a 1080 x 2400 screenshot's 5,088
# patches), one step of 2 new tokens, alternated, ROUNDS rounds (default 2).
#   bash ab.sh BASE_BINARY NEW_BINARY OUT_DIR [ROUNDS]
set -euo pipefail
base=$1 new=$2 out=$3 rounds=${4:-2}
args=(bench --config small --steps 1 --batch-size 1 --max-new-tokens 2 --max-pixels 1003520 --no-judge --json)
for round in $(seq 1 $rounds); do
    "$base" "${args[@]}" --dtype bf16 > "$out/bench-bf16-base-r$round.json" 2>/dev/null
    "$new" "${args[@]}" --dtype bf16 > "$out/bench-bf16-new-r$round.json" 2>/dev/null
done
