#!/usr/bin/env bash
# Issue 17, twelfth round: how often a checkpoint finds other registers than
# predicted (speculation_mismatch_registers) on this machine. SQLite
# at (128, 3 ms), ROUNDS (default 40) rounds, each running the builds in
# BUILDS (default "after", directories of target/device) in turns;
# prints one line per run: build, register mismatches, memory mismatches,
# checkpoints, breakpoint stops, traces.
set -u
D=target/device
for r in $(seq 1 "${ROUNDS:-40}"); do
  for b in ${BUILDS:-after}; do
    rm -rf "$D/tmp-rep"
    env BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock BREAKDANCE_PERIOD=3000000 BREAKDANCE_LBR=128 \
      BREAKDANCE_LOOKAHEAD=emulate BREAKDANCE_OUTPUT="$D/tmp-rep" LD_PRELOAD="$PWD/$D/$b/libbreakdance.so" \
      "$D/speedtest1" --memdb --testset main --size 25 > /dev/null 2>&1
    python3 -c "
import json, sys
d = json.load(open('$D/tmp-rep/summary.json'))
print('$b', d['speculation_mismatch_registers'], d['speculation_mismatch_memory'], d['checkpoints'], d['breakpoints'], d['traces_completed'])"
  done
done
rm -rf "$D/tmp-rep"
