#!/usr/bin/env bash
# tests/programs/blocked_raise.c (30,000 rounds: block SIGTRAP, raise it,
# work, unblock, work) natively and in each look-ahead mode, RUNS times
# (default 5), at a 1 ms period: one line per run with the mode and the
# SIGTRAPs the program's handler saw (30,000 natively).
#
# usage: results/signals/blocked_raise.sh LIBBREAKDANCE_SO
set -u
lib=$(realpath "$1")
tmp=$(mktemp -d)
clang-19 -O2 -Wall -Werror "$(dirname "$0")/../../tests/programs/blocked_raise.c" -o "$tmp/blocked_raise"
echo "mode,run,traps_seen"
for ((r = 1; r <= ${RUNS:-5}; r++)); do
  for mode in native paper verify emulate; do
    rm -rf "$tmp/out"
    if [ "$mode" = native ]; then
      line=$("$tmp/blocked_raise" 30000)
    else
      line=$(env LD_PRELOAD="$lib" BREAKDANCE_AUTOSTART=1 BREAKDANCE_OUTPUT="$tmp/out" \
        BREAKDANCE_PERIOD=1000000 BREAKDANCE_LOOKAHEAD=$mode "$tmp/blocked_raise" 30000)
    fi
    seen=${line#*done: }
    echo "$mode,$r,${seen%% traps*}"
  done
done
rm -rf "$tmp"
