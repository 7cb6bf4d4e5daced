#!/usr/bin/env bash
# Issue 17's closing measurements: the five workloads (their training
# inputs, as bench-harness runs them) at the issue's three settings, (32
# branches, 1 ms), (128, 3 ms) and (128, 10 ms), with the library preloaded
# and autostarted, against native runs in the same rounds (the order
# turning from round to round). Writes OUT/runs.csv (CPU from wait4, with
# results/speed/rusage.c built as target/ab/rusage) and each profiled run's
# summary.json as OUT/WORKLOAD-SETTING-ROUND.json; measure.py makes the
# table.
#
#   results/speed/round16/measure.sh LIB ROUNDS OUT
set -euo pipefail
lib=$(realpath "$1") rounds=$2 out=$3
root=$(cd "$(dirname "$0")/../../.." && pwd)
w=$root/target/workloads
rusage=$root/target/ab/rusage
[ -x "$rusage" ] || { echo "measure.sh: $rusage missing: gcc -O2 -o $rusage results/speed/rusage.c" >&2; exit 2; }
for f in build/sqlite/baseline/speedtest1 build/lua/baseline/lua build/bzip2/baseline/bzip2 inputs/bench.lua inputs/bench.py inputs/text-train.txt inputs/data-train.txt; do
  [ -e "$w/$f" ] || { echo "measure.sh: $w/$f missing: run bench-harness workloads once" >&2; exit 2; }
done
mkdir -p "$out"
{ grep -m1 'model name' /proc/cpuinfo; nproc; uname -r; ldd --version | sed -n 1p; } > "$out/machine.txt"
declare -A cmd=(
  [sqlite]="$w/build/sqlite/baseline/speedtest1 --memdb --testset main --size 40"
  [lua]="$w/build/lua/baseline/lua $w/inputs/bench.lua train 10"
  [bzip2]="$w/build/bzip2/baseline/bzip2 -c -9 $w/inputs/text-train.txt"
  [python3]="env PYTHONHASHSEED=0 /usr/bin/python3 $w/inputs/bench.py train 3"
  [xz]="/usr/bin/xz -c -6 -T1 $w/inputs/data-train.txt"
)
workloads=(sqlite lua bzip2 python3 xz)
settings=(native 32:1 128:3 128:10)
echo "workload,setting,round,user_s,sys_s,maxrss_kb,rc" > "$out/runs.csv"
for ((r = 1; r <= rounds; r++)); do
  for wl in "${workloads[@]}"; do
    read -r -a c <<< "${cmd[$wl]}"
    n=${#settings[@]}
    for ((i = 0; i < n; i++)); do
      s=${settings[$(((i + r) % n))]}
      if [ "$s" = native ]; then
        line=$("$rusage" "${c[@]}")
      else
        lbr=${s%%:*} ms=${s##*:}
        rm -rf "$out/tmp"
        line=$("$rusage" env BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock \
          BREAKDANCE_PERIOD=$((ms * 1000000)) BREAKDANCE_LBR="$lbr" BREAKDANCE_OUTPUT="$out/tmp" \
          LD_PRELOAD="$lib" "${c[@]}")
        cp "$out/tmp/summary.json" "$out/$wl-$lbr-${ms}ms-$r.json"
        s=$lbr-${ms}ms
      fi
      echo "$wl,$s,$r,$(echo "$line" | tr ' ' ',')" >> "$out/runs.csv"
    done
  done
  echo "measure.sh: round $r of $rounds done" >&2
done
rm -rf "$out/tmp"
