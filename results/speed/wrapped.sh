#!/usr/bin/env bash
# Wrapped signal handlers (quiet::wrap): two builds of libbreakdance.so on
# the harness's programs that install asynchronous signal handlers (Lua,
# python3, xz) and on SQLite speedtest1 (no handler, quiet either way), in
# interleaved rounds: per round and setting a native run, then the two
# builds in an order that alternates from round to round. Each run
# preloads the library and autostarts a session on task-clock, emulate
# mode; the CPU figure is the application's user + system time (GNU time).
# Every run starts with the signals' default actions (`env
# --default-signal`): a shell's background job inherits SIGINT ignored,
# and python3 then installs no handler.
#
#   results/speed/wrapped.sh BEFORE/libbreakdance.so AFTER/libbreakdance.so [ROUNDS] > results/speed/wrapped.csv
#   results/speed/wrapped.py results/speed/wrapped.csv
#
# WORKLOADS picks the programs (default: lua python3 xz sqlite); `bzip2`
# is bzip2 -9 on the quick training text repeated 12 times (6 MiB), the
# program of the step-limit change (results/speed/README.md):
#
#   WORKLOADS=bzip2 results/speed/wrapped.sh BEFORE AFTER 5 > results/speed/step-limit.csv
#
# The inputs are the harness's quick ones (`bench-harness overhead --quick`
# builds Lua and writes them; SQLite is built by a full run of any
# experiment that uses it, e.g. `bench-harness levels`).
set -euo pipefail
before=$1 after=$2 rounds=${3:-5}
root=$(cd "$(dirname "$0")/../.." && pwd)
w=$root/target/workloads
declare -A cmd=(
  [lua]="$w/build/lua/baseline/lua $w/inputs-quick/bench.lua train 10"
  [python3]="/usr/bin/python3 $w/inputs-quick/bench.py train 1"
  [xz]="/usr/bin/xz -c -6 -T1 $w/inputs-quick/data-train.txt"
  [sqlite]="$w/build/sqlite/baseline/speedtest1 --memdb --testset main --size 25"
)
workloads=${WORKLOADS:-lua python3 xz sqlite}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [[ " $workloads " == *" bzip2 "* ]]; then
  [ -f "$w/inputs-quick/text-train.txt" ] || { echo "wrapped: $w/inputs-quick/text-train.txt missing" >&2; exit 2; }
  for _ in $(seq 12); do cat "$w/inputs-quick/text-train.txt"; done > "$work/text.txt"
  cmd[bzip2]="$w/build/bzip2/baseline/bzip2 -c -9 $work/text.txt"
fi
for k in $workloads; do
  first=${cmd[$k]%% *}
  [ -x "$first" ] || { echo "wrapped: $first missing (see the header)" >&2; exit 2; }
done
cpu() { awk '{printf "%.3f", $1 + $2}' "$work/time"; }
echo "workload,lbr,period_ms,round,build,cpu_s,traces,stops_per_trace,run_per_kept,handler_us_per_trace,ns_per_step,proven_pct,settled,unsettled,signal_handler,completed_pct"
for r in $(seq 1 "$rounds"); do
  for k in $workloads; do
    for setting in "128 3" "128 10"; do
      set -- $setting
      # shellcheck disable=SC2086 # the command's words
      /usr/bin/time -o "$work/time" -f '%U %S' env --default-signal ${cmd[$k]} >/dev/null 2>&1
      echo "$k,$1,$2,$r,native,$(cpu),,,,,,,,,,"
      order="before after"; [ $((r % 2)) = 0 ] && order="after before"
      for build in $order; do
        so=$before; [ "$build" = after ] && so=$after
        rm -rf "$work/o"
        # shellcheck disable=SC2086
        /usr/bin/time -o "$work/time" -f '%U %S' env --default-signal BREAKDANCE_AUTOSTART=1 \
          BREAKDANCE_EVENT=task-clock BREAKDANCE_PERIOD=$(($2 * 1000000)) BREAKDANCE_LBR=$1 \
          BREAKDANCE_LOOKAHEAD=emulate BREAKDANCE_OUTPUT="$work/o" LD_PRELOAD="$so" ${cmd[$k]} >/dev/null 2>&1
        python3 - "$work/o/summary.json" "$k,$1,$2,$r,$build,$(cpu)" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
t = max(1, d["traces_started"]); e = max(1, d["entries_recorded"])
print("%s,%d,%.2f,%.2f,%.1f,%.0f,%.1f,%d,%d,%d,%.1f" % (sys.argv[2], t,
    d["breakpoints"] / t, d["emulated_steps_run"] / max(1, d["emulated_steps"]),
    (d["sampling_ns"] + d["breakpoint_ns"]) / t / 1000,
    d["emulation_ns"] / max(1, d["emulated_steps"]), 100 * d["proven_entries"] / e,
    d.get("segments_settled", 0), d.get("segments_unsettled", 0),
    d["aborts"].get("signal_handler", 0), 100 * d["traces_completed"] / t))
PY
      done
    done
  done
done
