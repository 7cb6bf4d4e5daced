#!/usr/bin/env bash
B=/work/wt-emu/target/workloads/build/sqlite/baseline/speedtest1
ARGS="--memdb --testset main --size 70 --primarykey"
CTL=/work/wt-emu/target/release/profiler-ctl
cpu() { /usr/bin/time -f "%U %S" "$@" 2>&1 >/dev/null | tail -1 | awk '{print $1+$2}'; }
for r in 1 2 3 4 5; do
  n=$(cpu $B $ARGS)
  a=$(cpu $CTL record -q -c 1000000 --lbr 1 --lookahead paper -o /tmp/lbrx/p1 -- $B $ARGS)
  b=$(cpu $CTL record -q -c 1000000 --lbr 1 -o /tmp/lbrx/e1 -- $B $ARGS)
  tp=$(grep -o '"traces_started":[0-9]*' /tmp/lbrx/p1/summary.json | cut -d: -f2)
  bp=$(grep -o '"breakpoints":[0-9]*' /tmp/lbrx/p1/summary.json | cut -d: -f2)
  be=$(grep -o '"breakpoints":[0-9]*' /tmp/lbrx/e1/summary.json | cut -d: -f2)
  te=$(grep -o '"traces_started":[0-9]*' /tmp/lbrx/e1/summary.json | cut -d: -f2)
  echo "$n $a $b $tp $bp $te $be"
done
