#!/usr/bin/env bash
# Emulate mode's cost on SQLite speedtest1, two builds of libbreakdance.so
# interleaved (native, then the two builds in an order that alternates
# from round to round, so that the machine's drift falls on all alike), at the issue's three settings: (32 branches, 1 ms),
# (128, 3 ms), (128, 10 ms). Each run preloads the library and autostarts a
# session on task-clock; the CPU figure is the application's user + system
# time (GNU time), not profiler-ctl's (which runs llvm-profgen after).
#
#   results/speed/measure.sh BEFORE/libbreakdance.so AFTER/libbreakdance.so [ROUNDS] > results/speed/runs.csv
#
# (the library only starts when LD_PRELOAD names a file libbreakdance*).
#
# Per run, from summary.json: emulated ns per step (emulation_ns /
# emulated_steps), decodes per 100 steps, steps and extra CPU per trace,
# the checkpoint mismatches (registers/memory) and validated entries, steps
# run per kept step, breakpoint stops per trace and the handlers' time per
# trace (sampling_ns + breakpoint_ns: the kernel's delivery of each stop is
# not in it).
set -euo pipefail
before=$1 after=$2 rounds=${3:-5}
root=$(cd "$(dirname "$0")/../.." && pwd)
speedtest=$root/target/workloads/build/sqlite/baseline/speedtest1
[ -x "$speedtest" ] || { echo "measure: $speedtest missing: run bench-harness overhead --quick once" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmd=("$speedtest" --memdb --testset main --size 25)
cpu() { # user+sys seconds of one run of "$@" (env first)
  /usr/bin/time -o "$work/time" -f '%U %S' env "$@" >/dev/null 2>&1 || true
  awk '{printf "%.3f", $1 + $2}' "$work/time"
}
stats() { # fields of one run's summary
  python3 - "$1/summary.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
steps = max(1, d["emulated_steps"]); traces = max(1, d["traces_started"])
print("%.1f,%.2f,%.0f,%d,%d,%d,%d,%.3f,%.2f,%.1f" % (d["emulation_ns"] / steps,
    100 * d["emulation_decodes"] / steps, d["emulated_steps"] / traces,
    d["traces_started"], d["validated_entries"],
    d["speculation_mismatch_registers"], d["speculation_mismatch_memory"],
    d["emulated_steps_run"] / steps, d["breakpoints"] / traces,
    (d["sampling_ns"] + d["breakpoint_ns"]) / traces / 1000))
PY
}
echo "lbr,period_ms,round,native_s,build,cpu_s,ns_per_step,decodes_per_100,steps_per_trace,traces,validated_entries,mismatch_registers,mismatch_memory,steps_run_per_kept,stops_per_trace,handler_us_per_trace"
for r in $(seq 1 "$rounds"); do
  for setting in "32 1" "128 3" "128 10"; do
    set -- $setting
    n=$(cpu "${cmd[@]}")
    order="before after"; [ $((r % 2)) = 0 ] && order="after before"
    for build in $order; do
      so=$before; [ $build = after ] && so=$after
      rm -rf "$work/o"
      c=$(cpu BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock BREAKDANCE_PERIOD=$(($2 * 1000000)) \
        BREAKDANCE_LBR=$1 BREAKDANCE_LOOKAHEAD=emulate BREAKDANCE_OUTPUT="$work/o" LD_PRELOAD="$so" "${cmd[@]}")
      echo "$1,$2,$r,$n,$build,$c,$(stats "$work/o")"
    done
  done
done
