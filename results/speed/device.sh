#!/usr/bin/env bash
# The speed measurements on a second machine (the device machine: no
# toolchain, no python, no GNU time). Run from the repository root with
# the binaries prepared in target/device (see results/speed/README.md):
# before/libbreakdance.so, after/libbreakdance.so, speedtest1,
# threads_work, short_threads, rusage. Writes runs.csv and each run's
# summary.json to $OUT (default: target/device/out).
set -u
D=target/device
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
    line=$("$D/rusage" env BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock BREAKDANCE_PERIOD="$period" \
      BREAKDANCE_LBR="$lbr" BREAKDANCE_LOOKAHEAD=emulate BREAKDANCE_OUTPUT="$dir" \
      LD_PRELOAD="$PWD/$D/$build/libbreakdance.so" "$@")
    cp "$dir/summary.json" "$OUT/$part-$setting-$r-$build.json" 2>/dev/null
  fi
  echo "$part,$setting,$r,$build,$(echo "$line" | tr ' ' ',')" >> "$OUT/runs.csv"
}
both() { # part setting round lbr period CMD...: native, then the builds in alternating order
  local part=$1 setting=$2 r=$3 lbr=$4 period=$5; shift 5
  run "$part" "$setting" "$r" native "$lbr" "$period" "$@"
  local order="before after"; [ $((r % 2)) = 0 ] && order="after before"
  for b in $order; do run "$part" "$setting" "$r" "$b" "$lbr" "$period" "$@"; done
}
for r in 1 2 3 4 5 6 7; do
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
done
rm -rf "$OUT/tmp"
echo done
