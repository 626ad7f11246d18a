#!/bin/bash
# usage: ab2.sh ROUNDS DTYPE TOK bins...
R=$1; DT=$2; TOK=$3; shift 3
for r in $(seq $R); do for b in "$@"; do perf stat -e context-switches,task-clock -x, /tmp/bin-$b bench --config small --dtype $DT --steps 1 --batch-size 1 --max-new-tokens $TOK --max-pixels 12544 --no-judge --json 2>/tmp/st.txt > /tmp/ab.json; python3 -c "
import json;d=json.load(open('/tmp/ab.json'));p=d['phases'][0]
st=[l.split(',') for l in open('/tmp/st.txt').read().splitlines() if ',context-switches,' in l or ',task-clock,' in l]
print('$b',round(p['decode_seconds']/p['decode_steps']*1000,2),'ms/step share',round(d['decode_bandwidth']['share_of_bandwidth'],3),'stream',round(d['decode_bandwidth']['stream_read_bytes_per_second']/1e9,1),'cs',st[0][0],'cpus',round(float(st[1][0])/1000/p['wall_seconds'],2))"; done; done
