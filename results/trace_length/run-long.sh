#!/usr/bin/env bash
# Long traces: SQLite's speedtest1 in emulate mode at 1 ms with N = 32, 64,
# 128 and 256, interleaved with native runs. Prints, per round, the CPU
# seconds (user + system) of each run, then per N the traces, the entries
# recorded and the breakpoint stops of the last round's recordings.
set -euo pipefail
source "$(dirname "$0")/common.sh"
OUT=${OUT:-/tmp/lbr-long}
mkdir -p "$OUT"
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
  d=$OUT/o$n
  echo "$n $(field $d traces_started) $(field $d entries_recorded) $(field $d breakpoints) $(field $d emulated_steps) $(field $d speculation_mismatch_memory)"
done
