#!/usr/bin/env bash
# The library's own heap (src/alloc.rs) against glibc's malloc: SQLite's
# speedtest1 natively and under each build, in turns (the order turning
# from round to round, so this guest's drift falls on every build alike).
# One line per run: setting, round, build, user and system CPU seconds,
# peak RSS (KiB), exit status, and from summary.json the worker's CPU,
# the start and stop, the traces written.
#
# usage: results/speed/round15/heap.sh SPEEDTEST1 RUSAGE BUILD_DIR...
#   (each BUILD_DIR holds a libbreakdance.so and is named by its basename;
#   ROUNDS, default 20; SETTINGS, default "128:3000000 128:10000000")
set -u
speedtest=$1 rusage=$2
shift 2
builds=("$@")
ROUNDS=${ROUNDS:-20}
SETTINGS=${SETTINGS:-128:3000000 128:10000000}
tmp=$(mktemp -d)
echo "setting,round,build,user_s,sys_s,maxrss_kb,rc,worker_ns,start_stop_ns,traces_written"
cmd=("$speedtest" --memdb --testset main --size 25)
for ((r = 1; r <= ROUNDS; r++)); do
  for s in $SETTINGS; do
    lbr=${s%%:*} period=${s##*:}
    order=(native "${builds[@]}")
    n=${#order[@]}
    for ((i = 0; i < n; i++)); do
      b=${order[$(((i + r) % n))]}
      if [ "$b" = native ]; then
        line=$("$rusage" "${cmd[@]}")
        extra=",,"
      else
        rm -rf "$tmp/out"
        line=$("$rusage" env BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock \
          BREAKDANCE_PERIOD="$period" BREAKDANCE_LBR="$lbr" BREAKDANCE_LOOKAHEAD=emulate \
          BREAKDANCE_OUTPUT="$tmp/out" LD_PRELOAD="$(realpath "$b")/libbreakdance.so" "${cmd[@]}")
        extra=$(python3 -c "
import json; d = json.load(open('$tmp/out/summary.json'))
print('%d,%d,%d' % (d['worker_ns'], d['start_stop_ns'], d['traces_written']))")
        b=$(basename "$b")
      fi
      echo "$lbr-$((period / 1000000))ms,$r,$b,$(echo "$line" | tr ' ' ','),$extra"
    done
  done
done
rm -rf "$tmp"
