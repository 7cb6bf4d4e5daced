#!/usr/bin/env bash
# One-branch traces at 1 ms, paper against emulate, interleaved with native
# runs: CPU seconds of each, then traces and breakpoints of each mode.
source "$(dirname "$0")/common.sh"
mkdir -p /tmp/lbrx
for r in 1 2 3 4 5; do
  n=$(cpu $B $ARGS)
  a=$(cpu $CTL record -q -c 1000000 --lbr 1 --lookahead paper -o /tmp/lbrx/p1 -- $B $ARGS)
  b=$(cpu $CTL record -q -c 1000000 --lbr 1 -o /tmp/lbrx/e1 -- $B $ARGS)
  tp=$(field /tmp/lbrx/p1 traces_started)
  bp=$(field /tmp/lbrx/p1 breakpoints)
  be=$(field /tmp/lbrx/e1 breakpoints)
  te=$(field /tmp/lbrx/e1 traces_started)
  echo "$n $a $b $tp $bp $te $be"
done
