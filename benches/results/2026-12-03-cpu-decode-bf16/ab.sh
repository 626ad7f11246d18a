#!/bin/bash
# Alternated A/B on the idle machine: base d5e258d vs new build.
set -u
OUT=/work/main/benches/results/2026-12-03-cpu-decode-bf16
NEW=/tmp/new-final
BASE=/tmp/base-d5e258d
uptime > $OUT/uptime-before.txt
for round in 1 2; do
  for dt in f32 bf16; do
    for tag in base new; do
      bin=$BASE; [ $tag = new ] && bin=$NEW
      $bin bench --config small --dtype $dt --steps 1 --batch-size 1 --max-new-tokens 32 --max-pixels 50176 --no-judge --json > $OUT/bench-small-$dt-decode-$tag-r$round.json 2>/dev/null
      python3 -c "import json;d=json.load(open('$OUT/bench-small-$dt-decode-$tag-r$round.json'))['decode_bandwidth'];print('decode $dt $tag r$round share',round(d['share_of_bandwidth'],3),'weights GB/s',round(d['weight_bytes_per_second']/1e9,1),'stream',round(d['stream_read_bytes_per_second']/1e9,1))"
    done
  done
done
for round in 1 2; do
  for tag in base new; do
    bin=$BASE; [ $tag = new ] && bin=$NEW
    $bin bench --config small --dtype bf16 --steps 1 --batch-size 1 --max-new-tokens 2 --max-pixels 250880 --no-judge --json > $OUT/bench-small-bf16-250880-$tag-r$round.json 2>/dev/null
    python3 -c "import json;d=json.load(open('$OUT/bench-small-bf16-250880-$tag-r$round.json'));print('bf16 prefill $tag r$round steps/s',round(d['steps_per_second'],4),'prefill tok/s',round(d['prefill_tokens_per_second'],1),'mfu_prefill',round(d['mfu_prefill'],3))"
  done
done
uptime >> $OUT/uptime-before.txt
