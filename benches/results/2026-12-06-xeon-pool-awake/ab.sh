#!/bin/bash
# usage: ab3.sh ROUNDS DTYPE bins...   (the docs' standard decode bench: 50176 px, 64 new tokens)
R=$1; DT=$2; shift 2
for r in $(seq $R); do for b in "$@"; do /tmp/bin-$b bench --config small --dtype $DT --steps 1 --batch-size 1 --max-new-tokens 64 --max-pixels 50176 --no-judge --json 2>/dev/null > /tmp/ab3.json; python3 -c "
import json;d=json.load(open('/tmp/ab3.json'));p=d['phases'][0];b=d['decode_bandwidth']
print('$b',round(p['decode_seconds']/p['decode_steps']*1000,2),'ms/step share',round(b['share_of_bandwidth'],3),'weights',round(b['weight_bytes_per_second']/1e9,1),'GB/s stream',round(b['stream_read_bytes_per_second']/1e9,1))"; done; done
