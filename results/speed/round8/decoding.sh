#!/usr/bin/env bash
# What decoding costs the emulation in the handler (decode_ns, counted
# since 376f163): SQLite speedtest1, bzip2 -9 and Lua at issue 17's three
# settings, RUNS runs each (default 3), the library autostarted; with
# several libraries, each in turn within a round.
#
#   results/speed/round8/decoding.sh [RUNS [LIB...]] > decoding.csv
set -euo pipefail
runs=${1:-3}
root=$(cd "$(dirname "$0")/../../.." && pwd)
w=$root/target/workloads
shift || true
libs=("$@")
[ ${#libs[@]} -gt 0 ] || libs=("$root/target/release/libbreakdance.so")
for lib in "${libs[@]}"; do
  [ -f "$lib" ] || { echo "decoding: $lib missing: cargo build --release -p breakdance" >&2; exit 2; }
done
for f in build/sqlite/baseline/speedtest1 build/bzip2/baseline/bzip2 build/lua/baseline/lua inputs/text-train.txt inputs/bench.lua; do
  [ -e "$w/$f" ] || { echo "decoding: $w/$f missing: run bench-harness overhead --quick once" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
head -c 2000000 "$w/inputs/text-train.txt" > "$work/text"
echo "lib,workload,lbr,period_ms,run,traces,steps_run,emulation_ns,decodes,decode_ns,ns_per_step_run,decodes_per_100_steps,decode_ns_per_decode,decoding_share_of_emulation,predecodes,worker_ns,sampling_ns"
one() { # name lbr ms run cmd...
  local name=$1 lbr=$2 ms=$3 r=$4; shift 4
  rm -rf "$work/o"
  env BREAKDANCE_AUTOSTART=1 BREAKDANCE_PERIOD=$((ms * 1000000)) BREAKDANCE_LBR="$lbr" \
    BREAKDANCE_OUTPUT="$work/o" LD_PRELOAD="$lib" "$@" > /dev/null
  python3 - "$work/o/summary.json" "$lib,$name,$lbr,$ms,$r" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
st, ns, d, dn = s["emulated_steps_run"], s["emulation_ns"], s["emulation_decodes"], s["decode_ns"]
print("%s,%d,%d,%d,%d,%d,%.1f,%.2f,%.0f,%.3f,%d,%d,%d" % (sys.argv[2], s["traces_started"], st, ns, d, dn,
    ns / max(st, 1), 100 * d / max(st, 1), dn / max(d, 1), dn / max(ns, 1),
    s.get("emulation_predecodes", 0), s["worker_ns"], s["sampling_ns"]))
PY
}
for r in $(seq 1 "$runs"); do
  for setting in "32 1" "128 3" "128 10"; do
    set -- $setting
    for lib in "${libs[@]}"; do
      one sqlite "$1" "$2" "$r" "$w/build/sqlite/baseline/speedtest1" --memdb --testset main --size 25
      one bzip2 "$1" "$2" "$r" "$w/build/bzip2/baseline/bzip2" -c -9 "$work/text"
      one lua "$1" "$2" "$r" "$w/build/lua/baseline/lua" "$w/inputs/bench.lua" train 10
    done
  done
done
