#!/bin/bash
# Verify-mode runs of the five workloads' quick training inputs, one after
# another, ROUNDS times (task-clock every 1 ms, 32 branches, as
# `bench-harness verify --quick`): one line per run with the workload, the
# exit status, predictions checked, mismatches and stops with other
# registers than predicted.
#
# usage: LIB=target/release/libbreakdance.so CACHE=DIR ROUNDS=60 runs.sh
# (CACHE: a bench-harness --cache, after `bench-harness workloads --cache DIR`
# and `bench-harness workloads --quick --cache DIR`).
set -u
lib=$(realpath "${LIB:-target/release/libbreakdance.so}")
c=${CACHE:?a bench-harness cache}
q=$c/inputs-quick
out=$(mktemp -d)
for i in $(seq 1 "${ROUNDS:-60}"); do
  for w in "lua:$c/build/lua/baseline/lua $q/bench.lua train 2" \
           "bzip2:$c/build/bzip2/baseline/bzip2 -c -9 $q/text-train.txt" \
           "xz:/usr/bin/xz -c -6 -T1 $q/data-train.txt" \
           "sqlite:$c/build/sqlite/baseline/speedtest1 --memdb --testset main --size 4" \
           "python3:/usr/bin/python3 $q/bench.py train 0.25"; do
    rm -rf "$out/run"
    PYTHONHASHSEED=0 LD_PRELOAD=$lib BREAKDANCE_AUTOSTART=1 BREAKDANCE_PERIOD=1000000 \
      BREAKDANCE_LBR=32 BREAKDANCE_LOOKAHEAD=verify BREAKDANCE_OUTPUT=$out/run \
      ${w#*:} > /dev/null 2>&1
    rc=$?
    python3 -c "
import json, sys
d = json.load(open('$out/run/summary.json'))
print('${w%%:*}', $rc, d['verify_checked'], d['verify_mismatches'], d['verify_register_mismatches'])"
  done
done
rm -rf "$out"
