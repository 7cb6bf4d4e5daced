#!/usr/bin/env bash
# Programs that take faults while a SIGTRAP of the tracer waits blocked
# (ARCHITECTURE.md, "A blocked SIGTRAP can come first"), run RUNS times in
# paper and emulate modes under `CTL record -q -c 100000`, with two busy
# loops beside them (the CI failure of 509a92b came under load):
#
# - tests/programs/blocked_sigtrap_faults.c 300: faults (SIGSEGV, SIGFPE,
#   SIGILL in turn) taken with SIGTRAP blocked, each checked and stepped
#   over by the program's own handler;
# - tests/programs/unmapped_code.c 1000: code that makes its own page
#   inaccessible under the look-ahead, whose fault-safe loads then fault
#   inside the tracer's handler.
#
#   results/signals/run.sh CTL RUNS > out.csv
#
# PROGRAMS and MODES narrow the runs (default: both programs, both modes).
# CTL is a profiler-ctl with its libbreakdance.so beside it (a build of
# any commit). One row per run: the exit status ("signal N" when a signal
# ended it) and, from summary.json when one was written, the host
# counters of the case, samples, and the share of the threads' CPU time
# their sampling was off.
set -euo pipefail
ctl=$(realpath "$1") runs=${2:-10}
root=$(cd "$(dirname "$0")/../.." && pwd)
command -v clang-19 > /dev/null || { echo "run.sh: clang-19 missing (scripts/install-deps.sh)" >&2; exit 2; }
work=$(mktemp -d)
hogs=()
cleanup() {
  for h in "${hogs[@]}"; do kill "$h" 2> /dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
programs=${PROGRAMS:-blocked_sigtrap_faults unmapped_code}
modes=${MODES:-paper emulate}
for p in $programs; do
  clang-19 -O2 -gdwarf-4 -I"$root/tests/programs" "$root/tests/programs/$p.c" -o "$work/$p"
done
for _ in 1 2; do
  (while :; do :; done) &
  hogs+=($!)
done
echo "program,mode,run,status,sigtraps_put_back,sigtraps_lost,samples_merged,samples,sampling_off"
for run in $(seq 1 "$runs"); do
  for p in $programs; do
    arg=300
    [ "$p" = unmapped_code ] && arg=1000
    for mode in $modes; do
      rm -rf "$work/out"
      set +e
      "$ctl" record -q -c 100000 --lookahead "$mode" -o "$work/out" -- "$work/$p" "$arg" > /dev/null 2>&1
      rc=$?
      set -e
      status=$rc
      [ "$rc" -gt 128 ] && status="signal $((rc - 128))"
      counters=$(python3 - "$work/out/summary.json" << 'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except OSError:
    print(",,,,")
    sys.exit()
h = d["host"]
off = d["sampling_off_ns"] / d["threads_cpu_ns"] if d["threads_cpu_ns"] else 0
print(f'{h.get("sigtraps_put_back", "")},{h.get("sigtraps_lost", "")},'
      f'{d.get("samples_merged", "")},{d["samples"]},{off:.3f}')
PY
)
      echo "$p,$mode,$run,$status,$counters"
    done
  done
done
