#!/usr/bin/env bash
# Issue 17, second round (proven tails, the Nth-branch seal, branch-free
# byte masks), measured on the device machine (16-core Intel Xeon, no
# toolchain, no python): the library before (3570f42) and after, preloaded
# and autostarted on task-clock in emulate mode, each round a native run
# then the two builds in alternating order. Binaries prepared in
# target/device2 (see README.md here). Writes runs.csv and each run's
# summary.json to $OUT.
#
# Parts:
# - sqlite: speedtest1 --size 25 at (32, 1 ms), (128, 3 ms), (128, 10 ms);
#   at (128, 3 ms) also the after build with BREAKDANCE_MEASURE=sample-only
#   and emulate-only (what the emulation costs beyond its own time);
# - unrolled: tests/programs/unrolled.c (a loop of 60 ALU instructions per
#   taken branch), 200 calls, at 10 ms and 1 ms;
# - sigprof: tests/programs/callchains.c -DWITH_SIGNAL (its SIGPROF handler
#   a clang-unrolled loop), 20000 iterations, at 200 us;
# - qsort: results/speed/threads_work.c, 1 and 16 threads, 500 rounds.
#
# The SQLite table of this machine (README.md, local-table.md) is
#   PARTS=sqlite SQLITE_ROUNDS=15 OUT=results/tails/local results/tails/device.sh
set -u
PARTS=${PARTS:-sqlite unrolled sigprof qsort}
SQLITE_ROUNDS=${SQLITE_ROUNDS:-7}
D=target/device2
OUT=${OUT:-$D/out}
mkdir -p "$OUT"
{ grep -m1 'model name' /proc/cpuinfo; nproc; uname -r; ldd --version | head -1; } > "$OUT/machine.txt"
echo "part,setting,round,build,user_s,sys_s,maxrss_kb,rc" > "$OUT/runs.csv"
run() { # part setting round build lbr period_ns CMD...
  local part=$1 setting=$2 r=$3 build=$4 lbr=$5 period=$6; shift 6
  local dir=$OUT/tmp line lib=$build measure=off
  rm -rf "$dir"
  case $build in
    sample-only|emulate-only) lib=after measure=$build ;;
  esac
  if [ "$build" = native ]; then
    line=$("$D/rusage" "$@")
  else
    line=$("$D/rusage" env BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock BREAKDANCE_PERIOD="$period" \
      BREAKDANCE_LBR="$lbr" BREAKDANCE_LOOKAHEAD=emulate BREAKDANCE_OUTPUT="$dir" BREAKDANCE_MEASURE=$measure \
      LD_PRELOAD="$PWD/$D/$lib/libbreakdance.so" "$@")
    cp "$dir"/*/summary.json "$OUT/$part-$setting-$r-$build.json" 2>/dev/null ||
      cp "$dir/summary.json" "$OUT/$part-$setting-$r-$build.json" 2>/dev/null
  fi
  echo "$part,$setting,$r,$build,$(echo "$line" | tr ' ' ',')" >> "$OUT/runs.csv"
}
both() { # part setting round lbr period [extra builds] -- CMD...
  local part=$1 setting=$2 r=$3 lbr=$4 period=$5; shift 5
  local extra=""
  while [ "$1" != "--" ]; do extra="$extra $1"; shift; done
  shift
  run "$part" "$setting" "$r" native "$lbr" "$period" "$@"
  local order="before after$extra"; [ $((r % 2)) = 0 ] && order="$extra after before"
  for b in $order; do run "$part" "$setting" "$r" "$b" "$lbr" "$period" "$@"; done
}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
has sqlite && for r in $(seq 1 "$SQLITE_ROUNDS"); do
  both sqlite 32-1ms "$r" 32 1000000 -- "$D/speedtest1" --memdb --testset main --size 25
  both sqlite 128-3ms "$r" 128 3000000 sample-only emulate-only -- "$D/speedtest1" --memdb --testset main --size 25
  both sqlite 128-10ms "$r" 128 10000000 -- "$D/speedtest1" --memdb --testset main --size 25
done
has unrolled && for r in 1 2 3 4 5; do
  both unrolled 128-10ms "$r" 128 10000000 -- "$D/unrolled" 200
  both unrolled 128-1ms "$r" 128 1000000 -- "$D/unrolled" 200
done
has sigprof && for r in 1 2; do
  both sigprof 128-200us "$r" 128 200000 -- "$D/sigprof" 20000
done
has qsort && for r in 1 2 3; do
  for t in 1 16; do
    both qsort "$t-threads" "$r" 128 3000000 -- "$D/threads_work" "$t" 500
  done
done
rm -rf "$OUT/tmp"
echo done
