#!/usr/bin/env bash
# Issue 17, twelfth round: CPU overhead measured with the program and
# its profiled twin running at the same time, one on each core, the
# cores swapped from round to round. On a 2-core guest whose host is
# shared, one program's CPU time moves by up to ±25% from one run to
# the next (decompose.sh); two runs at the same moment meet the same
# host, so their ratio keeps little of that drift.
#
# Run from the repository root with the binaries of
# results/speed/device.sh in target/device (cur/libbreakdance.so,
# speedtest1, lua, bzip2, bench.lua, text-train.txt, rusage). Writes
# runs.csv (one line per program per round, its pair named) and each
# profiled run's summary.json to $OUT (default target/device/concurrent).
#
# PAIRS (default: every configuration below) names what runs against
# native, each as CONFIG; "native" alone is an A/A pair (two native runs),
# the method's own spread. Configurations: native; never (the library
# started, never sampled: period 10 s); LBR-PERIODms (e.g. 128-10ms:
# tracing as usual, emulate mode, task-clock).
set -u
D=target/device
ROUNDS=${ROUNDS:-11}
OUT=${OUT:-$D/concurrent}
WORKLOADS=${WORKLOADS:-sqlite lua bzip2}
PAIRS=${PAIRS:-native never 32-1ms 128-3ms 128-10ms}
mkdir -p "$OUT"
{ grep -m1 'model name' /proc/cpuinfo; nproc; uname -r; ldd --version | head -1; } > "$OUT/machine.txt"
echo "workload,config,round,side,core,user_s,sys_s,maxrss_kb,rc" > "$OUT/runs.csv"
launch() { # workload config round side core CMD... (in the background; prints nothing)
  local w=$1 c=$2 r=$3 side=$4 core=$5; shift 5
  local dir=$OUT/tmp-$side
  rm -rf "$dir"
  (
    if [ "$c" = native ]; then
      line=$(taskset -c "$core" "$D/rusage" "$@")
    else
      local lbr=128 period=10000000000
      if [ "$c" != never ]; then
        lbr=${c%%-*}
        period=${c#*-}
        period=$((${period%ms} * 1000000))
      fi
      line=$(taskset -c "$core" "$D/rusage" env BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock \
        BREAKDANCE_PERIOD="$period" BREAKDANCE_LBR="$lbr" BREAKDANCE_LOOKAHEAD=emulate \
        BREAKDANCE_OUTPUT="$dir" LD_PRELOAD="$PWD/$D/cur/libbreakdance.so" "$@")
      cp "$dir/summary.json" "$OUT/$w-$c-$r.json" 2>/dev/null
    fi
    echo "$w,$c,$r,$side,$core,$(echo "$line" | tr ' ' ',')" >> "$OUT/runs-$side.part"
  ) &
}
for r in $(seq 1 "$ROUNDS"); do
  for w in $WORKLOADS; do
    case $w in
      sqlite) cmd=("$D/speedtest1" --memdb --testset main --size 25) ;;
      lua) cmd=("$D/lua" "$D/bench.lua" train 10) ;;
      bzip2) cmd=("$D/bzip2" -c -9 "$D/text-train.txt") ;;
    esac
    for c in $PAIRS; do
      rm -f "$OUT"/runs-*.part
      launch "$w" native "$r" base $((r % 2)) "${cmd[@]}"
      launch "$w" "$c" "$r" test $(((r + 1) % 2)) "${cmd[@]}"
      wait
      # The base run is native; its line is filed under the pair's config.
      sed "s/^$w,native,$r,base/$w,$c,$r,base/" "$OUT/runs-base.part" >> "$OUT/runs.csv"
      sed "s/^$w,native,$r,test/$w,$c,$r,test/" "$OUT/runs-test.part" >> "$OUT/runs.csv"
    done
  done
done
rm -rf "$OUT"/tmp-* "$OUT"/runs-*.part
echo done
