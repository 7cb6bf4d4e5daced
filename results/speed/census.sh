#!/usr/bin/env bash
# The handler's working set per trace: the lines each trace's handlers
# touch (src/census.rs), from a census build of the library made into
# target/census (target/release keeps the shipped build). SQLite
# speedtest1, bzip2 -9 and Lua at the issue's three settings; one run each
# (the counts do not depend on the machine's speed).
#
#   [SQLITE_SIZE=100] results/speed/census.sh > results/speed/census.csv
#
# SQLITE_SIZE (default 25, the harness's quick input) makes SQLite's run
# longer: at 10 ms the quick input takes about 50 traces, too few for a
# steady 90th percentile.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
w=$root/target/workloads
for f in build/sqlite/baseline/speedtest1 build/bzip2/baseline/bzip2 build/lua/baseline/lua inputs/text-train.txt inputs/bench.lua; do
  [ -e "$w/$f" ] || { echo "census: $w/$f missing: run bench-harness overhead --quick once" >&2; exit 2; }
done
CARGO_TARGET_DIR=$root/target/census cargo build --release -p breakdance --features census >&2
lib=$root/target/census/release/libbreakdance.so
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
head -c 2000000 "$w/inputs/text-train.txt" > "$work/text"
fields="handler_bytes_per_trace_mean handler_kib_per_trace_median_at_most handler_kib_per_trace_p90_at_most handler_kib_per_trace_max_at_most code_bytes_per_trace_mean index_bytes_per_trace_mean dispatch_bytes_per_trace_mean memory_bytes_per_trace_mean visits_bytes_per_trace_mean state_bytes_per_trace_mean tables_bytes_per_trace_mean buffer_bytes_per_trace_mean stack_bytes_per_trace_mean app_bytes_per_trace_mean"
echo "workload,lbr,period_ms,traces,traces_overflowed,stops_per_trace,steps_per_trace,decodes_per_trace,$(echo $fields | tr ' ' ',')"
run() { # name lbr period_ms cmd...
  local name=$1 lbr=$2 ms=$3; shift 3
  rm -rf "$work/o"
  env BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock BREAKDANCE_PERIOD=$((ms * 1000000)) \
    BREAKDANCE_LBR="$lbr" BREAKDANCE_LOOKAHEAD=emulate BREAKDANCE_OUTPUT="$work/o" \
    LD_PRELOAD="$lib" "$@" > /dev/null
  python3 - "$work/o" "$name,$lbr,$ms" "$fields" <<'PY'
import json, sys
out, head, fields = sys.argv[1], sys.argv[2], sys.argv[3].split()
c = dict(l.split(" ", 1) for l in open(out + "/census.txt").read().splitlines())
d = json.load(open(out + "/summary.json"))
t = max(1, d["traces_started"])
print(",".join([head, c["traces"], c["traces_overflowed"], "%.2f" % (d["breakpoints"] / t),
    "%.0f" % (d["emulated_steps"] / t), "%.1f" % (d["emulation_decodes"] / t)] + [c[f] for f in fields]))
PY
}
for setting in "32 1" "128 3" "128 10"; do
  set -- $setting
  run sqlite "$1" "$2" "$w/build/sqlite/baseline/speedtest1" --memdb --testset main --size "${SQLITE_SIZE:-25}"
  run bzip2 "$1" "$2" "$w/build/bzip2/baseline/bzip2" -c -9 "$work/text"
  run lua "$1" "$2" "$w/build/lua/baseline/lua" "$w/inputs/bench.lua" train 10
done
