#!/usr/bin/env bash
# Long traces: SQLite's speedtest1 in emulate mode at 1 ms with N = 32, 64,
# 128 and 256, interleaved with native runs. Prints, per round, the CPU
# seconds (user + system) of each run, then per N the traces, the entries
# recorded and the breakpoint stops of the last round's recordings.
set -euo pipefail
ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
B=$ROOT/target/workloads/build/sqlite/baseline/speedtest1
ARGS="--memdb --testset main --size 70 --primarykey"
CTL=$ROOT/target/release/profiler-ctl
OUT=${OUT:-/tmp/lbr-long}
mkdir -p "$OUT"
cpu() { /usr/bin/time -f "%U %S" "$@" 2>&1 >/dev/null | tail -1 | awk '{print $1+$2}'; }
field() { grep -o "\"$2\":[0-9]*" "$OUT/o$1/summary.json" | head -1 | cut -d: -f2; }
echo "round native N=32 N=64 N=128 N=256"
for r in 1 2 3 4 5; do
  line="$r $(cpu "$B" $ARGS)"
  for n in 32 64 128 256; do
    line="$line $(cpu "$CTL" record -q -c 1000000 --lbr $n -o "$OUT/o$n" -- "$B" $ARGS)"
  done
  echo "$line"
done
echo "N traces entries breakpoints emulated_steps speculation_mismatch_memory"
for n in 32 64 128 256; do
  echo "$n $(field $n traces_started) $(field $n entries_recorded) $(field $n breakpoints) $(field $n emulated_steps) $(field $n speculation_mismatch_memory)"
done
