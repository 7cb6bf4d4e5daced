#!/usr/bin/env bash
# SQLite's CPU under the library against native, in many short rounds:
# each round runs speedtest1 natively and under each build (the order
# turning from round to round), so that this guest's drift (±25% between
# single runs) falls on every build alike; overhead.py reads the ratios.
# Run from the repository root with the binaries of results/speed's
# device.sh in target/device. BUILDS (default "base head") names builds in
# target/device; ROUNDS (default 40); SETTINGS (default "128:3000000
# 128:10000000") the (branches:period ns) pairs; OUT (default
# target/device/overhead) gets runs.csv.
set -u
D=target/device
BUILDS=${BUILDS:-base head}
ROUNDS=${ROUNDS:-40}
SETTINGS=${SETTINGS:-128:3000000 128:10000000}
OUT=${OUT:-$D/overhead}
mkdir -p "$OUT"
{ grep -m1 'model name' /proc/cpuinfo; nproc; uname -r; } > "$OUT/machine.txt"
echo "setting,round,build,user_s,sys_s,maxrss_kb,rc" > "$OUT/runs.csv"
cmd=("$D/speedtest1" --memdb --testset main --size 25)
read -r -a builds <<< "$BUILDS"
for ((r = 1; r <= ROUNDS; r++)); do
  for s in $SETTINGS; do
    lbr=${s%%:*} period=${s##*:}
    order=(native "${builds[@]}")
    n=${#order[@]}
    for ((i = 0; i < n; i++)); do
      b=${order[$(((i + r) % n))]}
      if [ "$b" = native ]; then
        line=$("$D/rusage" "${cmd[@]}")
      else
        rm -rf "$OUT/tmp"
        line=$("$D/rusage" env BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock \
          BREAKDANCE_PERIOD="$period" BREAKDANCE_LBR="$lbr" BREAKDANCE_LOOKAHEAD=emulate \
          BREAKDANCE_OUTPUT="$OUT/tmp" LD_PRELOAD="$PWD/$D/$b/libbreakdance.so" "${cmd[@]}")
      fi
      echo "$lbr-$((period / 1000000))ms,$r,$b,$(echo "$line" | tr ' ' ',')" >> "$OUT/runs.csv"
    done
  done
done
