#!/usr/bin/env bash
# The speed measurements on a second machine (the device machine: no
# toolchain, no python, no GNU time). Run from the repository root with
# the binaries prepared in target/device (see results/speed/README.md):
# before/libbreakdance.so, after/libbreakdance.so, speedtest1,
# threads_work, short_threads, rusage. Writes runs.csv and each run's
# summary.json to $OUT (default: target/device/out).
#
# BUILDS (default "before after") names the builds compared, each a
# directory of target/device holding libbreakdance.so and, optionally, a
# file `env` of extra VAR=value words for its runs (the same library with
# another option). ROUNDS (default 7) is the SQLite rounds (3 for the
# others).
set -u
D=target/device
BUILDS=${BUILDS:-before after}
ROUNDS=${ROUNDS:-7}
OUT=${OUT:-$D/out}
mkdir -p "$OUT"
{ grep -m1 'model name' /proc/cpuinfo; nproc; uname -r; ldd --version | head -1; } > "$OUT/machine.txt"
echo "part,setting,round,build,user_s,sys_s,maxrss_kb,rc" > "$OUT/runs.csv"
run() { # part setting round build lbr period_ns CMD...
  local part=$1 setting=$2 r=$3 build=$4 lbr=$5 period=$6; shift 6
  local dir=$OUT/tmp line
  rm -rf "$dir"
  if [ "$build" = native ]; then
    line=$("$D/rusage" "$@")
  else
    local extra=""
    [ -f "$D/$build/env" ] && extra=$(cat "$D/$build/env")
    # shellcheck disable=SC2086 # extra holds VAR=value words
    line=$("$D/rusage" env $extra BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock BREAKDANCE_PERIOD="$period" \
      BREAKDANCE_LBR="$lbr" BREAKDANCE_LOOKAHEAD=emulate BREAKDANCE_OUTPUT="$dir" \
      LD_PRELOAD="$PWD/$D/$build/libbreakdance.so" "$@")
    cp "$dir/summary.json" "$OUT/$part-$setting-$r-$build.json" 2>/dev/null
  fi
  echo "$part,$setting,$r,$build,$(echo "$line" | tr ' ' ',')" >> "$OUT/runs.csv"
}
both() { # part setting round lbr period CMD...: native, then the builds in an order that turns from round to round
  local part=$1 setting=$2 r=$3 lbr=$4 period=$5; shift 5
  local cmd=("$@") builds i
  run "$part" "$setting" "$r" native "$lbr" "$period" "${cmd[@]}"
  read -r -a builds <<< "$BUILDS"
  for ((i = 0; i < ${#builds[@]}; i++)); do
    run "$part" "$setting" "$r" "${builds[$(((i + r) % ${#builds[@]}))]}" "$lbr" "$period" "${cmd[@]}"
  done
}
for r in $(seq 1 "$ROUNDS"); do
  for s in "32 1" "128 3" "128 10"; do
    set -- $s
    both sqlite "$1-$2ms" "$r" "$1" $(($2 * 1000000)) "$D/speedtest1" --memdb --testset main --size 25
  done
done
for r in 1 2 3; do
  for t in 1 16; do
    both qsort "$t-threads" "$r" 128 3000000 "$D/threads_work" "$t" 1500
  done
  both churn 1000-threads "$r" 128 10000000 "$D/short_threads" 1000 50 50
  # Two more of bench-harness's workloads, where present (their training
  # inputs): bzip2 -9 of 6 MiB of text, Lua's benchmark script.
  if [ -x "$D/bzip2" ]; then
    both bzip2 128-3ms "$r" 128 3000000 "$D/bzip2" -c -9 "$D/text-train.txt"
  fi
  if [ -x "$D/lua" ]; then
    both lua 128-3ms "$r" 128 3000000 "$D/lua" "$D/bench.lua" train 10
  fi
done
rm -rf "$OUT/tmp"
echo done
