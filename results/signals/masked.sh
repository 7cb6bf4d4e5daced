#!/usr/bin/env bash
# tests/programs/masked_handler.c (a SIGPROF handler with every signal
# masked that passes the tracer's breakpoint after a sample fell due)
# RUNS times (default 10) in each look-ahead mode under each build, in
# turns, at a 1 ms period: one line per run with the build, the mode, the
# exit status (137: still running after 10 s, killed: hung; the program
# needs 0.5 s of CPU), the wall time, and from summary.json the samples,
# the breakpoint stops and the breakpoints renewed.
#
# usage: results/signals/masked.sh BUILD_DIR...
#   (each BUILD_DIR holds a libbreakdance.so, named by its basename)
set -u
tmp=$(mktemp -d)
clang-19 -O2 -Wall -Werror "$(dirname "$0")/../../tests/programs/masked_handler.c" -o "$tmp/masked_handler"
echo "build,mode,run,rc,wall_s,samples,breakpoints,breakpoints_renewed"
for ((r = 1; r <= ${RUNS:-10}; r++)); do
  for mode in paper verify emulate; do
    for b in "$@"; do
      rm -rf "$tmp/out"
      t0=$(date +%s%N)
      timeout -s KILL 10 env LD_PRELOAD="$(realpath "$b")/libbreakdance.so" BREAKDANCE_AUTOSTART=1 \
        BREAKDANCE_OUTPUT="$tmp/out" BREAKDANCE_PERIOD=1000000 BREAKDANCE_LOOKAHEAD=$mode \
        "$tmp/masked_handler" 500 > /dev/null 2>&1
      rc=$?
      wall_ms=$((($(date +%s%N) - t0) / 1000000))
      counts=",,"
      if [ $rc -eq 0 ]; then
        counts=$(python3 -c "
import json; d = json.load(open('$tmp/out/summary.json'))
print('%d,%d,%d' % (d['samples'], d['breakpoints'], d['breakpoints_renewed']))")
      fi
      printf '%s,%s,%d,%d,%d.%03d,%s\n' "$(basename "$b")" "$mode" "$r" "$rc" $((wall_ms / 1000)) $((wall_ms % 1000)) "$counts"
    done
  done
done
rm -rf "$tmp"
