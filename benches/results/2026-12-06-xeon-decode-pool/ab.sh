#!/bin/bash
# Alternated A/B of `bench` between binaries copied to /tmp/bin-<name> (one before, one after the change).
# usage: ab.sh ROUNDS DTYPE MAX_PIXELS MAX_NEW_TOKENS NAME...   e.g. ab.sh 6 bf16 50176 64 old new
# Prints per run: decode ms per step (one sequence), the decode share of the stream bandwidth measured in that
# run, prefill seconds, steps per second.
R=$1; D=$2; P=$3; N=$4; shift 4
for r in $(seq "$R"); do for b in "$@"; do
  /tmp/bin-$b bench --config small --dtype "$D" --steps 1 --batch-size 1 --max-new-tokens "$N" --max-pixels "$P" \
    --no-judge --json > /tmp/ab-$b.json 2>/dev/null
  python3 -c "
import json;a=json.load(open('/tmp/ab-$b.json'));ph=a['phases'][0]; t=a['time_split_seconds']
print('$b', round(ph['decode_seconds']/ph['decode_steps']*1000,2),'ms/step share', round(a['decode_bandwidth']['share_of_bandwidth'],3), 'prefill', round(t['prefill_including_vision'],2), 'steps/s', round(a['steps_per_second'],4))"
done; done
