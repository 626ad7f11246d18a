#!/bin/bash
# Alternated bench small: before (9c993ae) and after (merged main), same session.
cd /work/main
for round in 1 2; do
  for v in before after; do
    /usr/bin/time -f "%e s wall, %M KB maxrss" /work/baseline/mre-release-$v bench --config small --random-weights --steps 4 --batch-size 4 --max-new-tokens 4 --max-pixels 250880 --no-judge --json > /work/baseline/bench-$v-$round.json 2> /work/baseline/bench-$v-$round.err
    echo "$v $round $(uptime)"
  done
done
