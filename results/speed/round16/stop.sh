#!/usr/bin/env bash
# What a session's start and stop cost SQLite speedtest1 at 128 branches
# and PERIOD_MS (default 10, the default setting), builds in turns: each round runs the
# native program, then each build autostarted (the order turning from
# round to round), and records the process's CPU, wall time and peak RSS
# (GNU time)
# and the summary's start_stop_ns, sampling_ns and worker_ns, and its
# emulation and decoding times and counts.
#
#   results/speed/round16/stop.sh ROUNDS BUILD_DIR... > runs.csv
#
# Each BUILD_DIR holds a libbreakdance.so; its name is the build's name.
set -euo pipefail
rounds=$1; shift
root=$(cd "$(dirname "$0")/../../.." && pwd)
speedtest=$root/target/workloads/build/sqlite/baseline/speedtest1
[ -x "$speedtest" ] || { echo "stop.sh: $speedtest missing: run bench-harness workloads once" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmd=("$speedtest" --memdb --testset main --size 25)
echo "round,build,user_s,sys_s,wall_s,maxrss_kb,start_stop_ms,sampling_ms,worker_ms,traces,emulation_ms,steps,decode_ms,decodes"
builds=(native "$@")
n=${#builds[@]}
for ((r = 0; r < rounds; r++)); do
  for ((i = 0; i < n; i++)); do
    b=${builds[$(((i + r) % n))]}
    if [ "$b" = native ]; then
      /usr/bin/time -o "$work/t" -f '%U,%S,%e,%M' "${cmd[@]}" >/dev/null 2>&1
      echo "$r,native,$(cat "$work/t"),0,0,0,0,0,0,0,0"
      continue
    fi
    rm -rf "$work/out"
    /usr/bin/time -o "$work/t" -f '%U,%S,%e,%M' env BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock \
      BREAKDANCE_PERIOD=$((${PERIOD_MS:-10} * 1000000)) BREAKDANCE_LBR=128 BREAKDANCE_OUTPUT="$work/out" \
      LD_PRELOAD="$b/libbreakdance.so" "${cmd[@]}" >/dev/null 2>&1
    s=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("%.3f,%.3f,%.3f,%d,%.3f,%d,%.3f,%d" % (d["start_stop_ns"] / 1e6, d["sampling_ns"] / 1e6,
    d["worker_ns"] / 1e6, d["traces_started"], d["emulation_ns"] / 1e6, d["emulated_steps"],
    d["decode_ns"] / 1e6, d["emulation_decodes"]))' "$work/out/summary.json")
    echo "$r,$(basename "$b"),$(cat "$work/t"),$s"
  done
done
