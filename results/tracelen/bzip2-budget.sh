#!/bin/bash
# bzip2 -9 on the training input: native and the library autostarted at tracelen's 15 configurations, R interleaved rounds
# (results/tracelen/bzip2-budget.sh R > results/tracelen/bzip2-budget.csv)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
w=$(cd "$(dirname "$0")/../.." && pwd)/target/workloads
cmd="$w/build/bzip2/baseline/bzip2 -c -9 $w/inputs/text-train.txt"
root=$(cd "$(dirname "$0")/../.." && pwd)
lib=$root/target/release/libbreakdance.so
cpu() { /usr/bin/time -o "$work/t" -f "%U %S" "$@" > /dev/null; awk '{printf "%.3f", $1+$2}' "$work/t"; }
echo "round,lbr,period_ms,cpu_s,traces,completed,stops,budget,unreached,entries"
for r in $(seq 1 $1); do
  echo "$r,0,0,$(cpu $cmd),0,0,0,0,0,0"
  for n in 32 64 128 256 512; do for p in 1 3 10; do
    rm -rf "$work/o"
    c=$(cpu env BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock BREAKDANCE_PERIOD=$((p*1000000)) BREAKDANCE_LBR=$n BREAKDANCE_LOOKAHEAD=emulate BREAKDANCE_OUTPUT="$work/o" LD_PRELOAD=$lib $cmd)
    echo "$r,$n,$p,$c,$(python3 -c "
import json; d=json.load(open('"$work/o"/summary.json'))
print('%d,%d,%d,%d,%d,%d' % (d['traces_started'], d['traces_completed'], d['breakpoints'], d['aborts']['handler_budget'], d['checkpoint_unreached'], d['entries_written']))")"
  done; done
done
