#!/usr/bin/env bash
# Builds side by side on the harness's quick inputs: SQLite speedtest1,
# bzip2 -9 on 2 MB and Lua at issue 17's three settings, RUNS runs
# (default 3), each library in turn within a round, the library
# autostarted in emulate mode. Besides the speed per step it keeps the
# counters a wrong visit count would move: checkpoint mismatches,
# checkpoints never reached or passed, and stops per trace. Also qsort
# (results/speed/threads_work.c, 2 threads), whose traces stop often.
# ALWAYS_CHECK=1 arms a checkpoint for every segment, quiet or not.
#
#   [ALWAYS_CHECK=1] results/speed/round10/compare.sh [RUNS [LIB...]] > compare.csv
set -euo pipefail
runs=${1:-3}
root=$(cd "$(dirname "$0")/../../.." && pwd)
w=$root/target/workloads
shift || true
libs=("$@")
[ ${#libs[@]} -gt 0 ] || libs=("$root/target/release/libbreakdance.so")
for lib in "${libs[@]}"; do
  [ -f "$lib" ] || { echo "compare: $lib missing: cargo build --release -p breakdance" >&2; exit 2; }
done
for f in build/sqlite/baseline/speedtest1 build/bzip2/baseline/bzip2 build/lua/baseline/lua inputs/text-train.txt inputs/bench.lua; do
  [ -e "$w/$f" ] || { echo "compare: $w/$f missing: run bench-harness overhead --quick once" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
head -c 2000000 "$w/inputs/text-train.txt" > "$work/text"
cc -O2 -pthread -o "$work/threads_work" "$root/results/speed/threads_work.c"
echo "lib,workload,lbr,period_ms,run,traces,steps_run,emulation_ns,ns_per_step_run,decodes_per_100_steps,stops_per_trace,checkpoints,mismatch_registers,mismatch_memory,checkpoint_unreached,checkpoint_extra_hits,validated_entries,sampling_ns"
one() { # name lbr ms run cmd...
  local name=$1 lbr=$2 ms=$3 r=$4; shift 4
  rm -rf "$work/o"
  env BREAKDANCE_AUTOSTART=1 BREAKDANCE_PERIOD=$((ms * 1000000)) BREAKDANCE_LBR="$lbr" \
    BREAKDANCE_LOOKAHEAD=emulate BREAKDANCE_ALWAYS_CHECK="${ALWAYS_CHECK:-0}" BREAKDANCE_OUTPUT="$work/o" LD_PRELOAD="$lib" "$@" > /dev/null
  python3 - "$work/o/summary.json" "$(basename "$(dirname "$(dirname "$lib")")"),$name,$lbr,$ms,$r" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
t, st, ns = max(s["traces_started"], 1), s["emulated_steps_run"], s["emulation_ns"]
print("%s,%d,%d,%d,%.1f,%.2f,%.2f,%d,%d,%d,%d,%d,%d,%d" % (sys.argv[2], s["traces_started"], st, ns,
    ns / max(st, 1), 100 * s["emulation_decodes"] / max(st, 1), s["breakpoints"] / t, s["checkpoints"],
    s["speculation_mismatch_registers"], s["speculation_mismatch_memory"], s["checkpoint_unreached"],
    s["checkpoint_extra_hits"], s["validated_entries"], s["sampling_ns"]))
PY
}
for r in $(seq 1 "$runs"); do
  for setting in "32 1" "128 3" "128 10"; do
    set -- $setting
    for lib in "${libs[@]}"; do
      one sqlite "$1" "$2" "$r" "$w/build/sqlite/baseline/speedtest1" --memdb --testset main --size 25
      one bzip2 "$1" "$2" "$r" "$w/build/bzip2/baseline/bzip2" -c -9 "$work/text"
      one lua "$1" "$2" "$r" "$w/build/lua/baseline/lua" "$w/inputs/bench.lua" train 10
      one qsort "$1" "$2" "$r" "$work/threads_work" 2 300
    done
  done
done
