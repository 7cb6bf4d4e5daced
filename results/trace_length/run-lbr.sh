#!/usr/bin/env bash
B=/work/wt-emu/target/workloads/build/sqlite/baseline/speedtest1
ARGS="--memdb --testset main --size 70 --primarykey"
CTL=/work/wt-emu/target/release/profiler-ctl
cpu() { /usr/bin/time -f "%U %S" "$@" 2>&1 >/dev/null | tail -1 | awk '{print $1+$2}'; }
for r in 1 2 3 4 5; do
  n=$(cpu $B $ARGS)
  a=$(cpu $CTL record -q -c 1000000 --lbr 1 -o /tmp/lbrx/o1 -- $B $ARGS)
  b=$(cpu $CTL record -q -c 1000000 --lbr 8 -o /tmp/lbrx/o8 -- $B $ARGS)
  c=$(cpu $CTL record -q -c 1000000 --lbr 32 -o /tmp/lbrx/o32 -- $B $ARGS)
  t1=$(grep -o '"traces_started":[0-9]*' /tmp/lbrx/o1/summary.json | cut -d: -f2)
  t8=$(grep -o '"traces_started":[0-9]*' /tmp/lbrx/o8/summary.json | cut -d: -f2)
  t32=$(grep -o '"traces_started":[0-9]*' /tmp/lbrx/o32/summary.json | cut -d: -f2)
  s1=$(grep -o '"emulated_steps":[0-9]*' /tmp/lbrx/o1/summary.json | cut -d: -f2)
  s32=$(grep -o '"emulated_steps":[0-9]*' /tmp/lbrx/o32/summary.json | cut -d: -f2)
  echo "$n $a $b $c $t1 $t8 $t32 $s1 $s32"
done
