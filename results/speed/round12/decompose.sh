#!/usr/bin/env bash
# Issue 17, twelfth round: where a trace's CPU goes on this machine, by
# BREAKDANCE_MEASURE, as results/tails did on the Intel guest. Run from
# the repository root with the binaries of results/speed/device.sh in
# target/device (cur/libbreakdance.so, speedtest1, lua, bench.lua,
# rusage). Each round runs every configuration once, in an order that
# turns from round to round; writes runs.csv and each run's summary.json
# to $OUT (default target/device/decompose).
#
# Configurations (the library preloaded and autostarted on task-clock,
# emulate mode, 128 branches):
# - native: the program alone;
# - never: the library started, its period 10 s (no sample in the run):
#   the fixed cost of a process;
# - sample-only: samples every 3 ms that are counted and re-armed;
# - emulate-only: samples every 3 ms that emulate one segment into a
#   counting sink and arm nothing;
# - full-3ms, full-10ms: tracing as usual (10 ms is the default).
set -u
D=target/device
ROUNDS=${ROUNDS:-15}
OUT=${OUT:-$D/decompose}
mkdir -p "$OUT"
{ grep -m1 'model name' /proc/cpuinfo; nproc; uname -r; ldd --version | head -1; } > "$OUT/machine.txt"
echo "part,setting,round,build,user_s,sys_s,maxrss_kb,rc" > "$OUT/runs.csv"
CONFIGS=(native never sample-only emulate-only full-3ms full-10ms)
run() { # workload round config CMD...
  local w=$1 r=$2 c=$3; shift 3
  local dir=$OUT/tmp line period=3000000 measure=off
  rm -rf "$dir"
  case $c in
    never) period=10000000000 ;;
    sample-only | emulate-only) measure=$c ;;
    full-10ms) period=10000000 ;;
  esac
  if [ "$c" = native ]; then
    line=$("$D/rusage" "$@")
  else
    line=$("$D/rusage" env BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock BREAKDANCE_PERIOD="$period" \
      BREAKDANCE_LBR=128 BREAKDANCE_LOOKAHEAD=emulate BREAKDANCE_OUTPUT="$dir" BREAKDANCE_MEASURE=$measure \
      LD_PRELOAD="$PWD/$D/cur/libbreakdance.so" "$@")
    cp "$dir/summary.json" "$OUT/$w-$c-$r.json" 2>/dev/null
  fi
  echo "$w,$c,$r,$c,$(echo "$line" | tr ' ' ',')" >> "$OUT/runs.csv"
}
for r in $(seq 1 "$ROUNDS"); do
  for w in sqlite lua; do
    case $w in
      sqlite) cmd=("$D/speedtest1" --memdb --testset main --size 25) ;;
      lua) cmd=("$D/lua" "$D/bench.lua" train 10) ;;
    esac
    n=${#CONFIGS[@]}
    for ((i = 0; i < n; i++)); do
      run "$w" "$r" "${CONFIGS[$(((i + r) % n))]}" "${cmd[@]}"
    done
  done
done
rm -rf "$OUT/tmp"
echo done
