#!/usr/bin/env bash
# Trace length 1, 8 and 32 in emulate mode at 1 ms, interleaved with native
# runs: CPU seconds of each, traces, and emulated instructions (N = 1, 32).
source "$(dirname "$0")/common.sh"
mkdir -p /tmp/lbrx
for r in 1 2 3 4 5; do
  n=$(cpu $B $ARGS)
  a=$(cpu $CTL record -q -c 1000000 --lbr 1 -o /tmp/lbrx/o1 -- $B $ARGS)
  b=$(cpu $CTL record -q -c 1000000 --lbr 8 -o /tmp/lbrx/o8 -- $B $ARGS)
  c=$(cpu $CTL record -q -c 1000000 --lbr 32 -o /tmp/lbrx/o32 -- $B $ARGS)
  t1=$(field /tmp/lbrx/o1 traces_started)
  t8=$(field /tmp/lbrx/o8 traces_started)
  t32=$(field /tmp/lbrx/o32 traces_started)
  s1=$(field /tmp/lbrx/o1 emulated_steps)
  s32=$(field /tmp/lbrx/o32 emulated_steps)
  echo "$n $a $b $c $t1 $t8 $t32 $s1 $s32"
done
