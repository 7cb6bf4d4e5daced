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
# others). PARTS (default "sqlite others") picks what runs:
#
# - sqlite: speedtest1 at (32, 1 ms), (128, 3 ms), (128, 10 ms);
# - others: qsort (1 and 16 threads), the churn of 1000 threads, and
#   bzip2 and Lua where present;
# - verify: the last build in verify mode (every prediction checked at a
#   stop; the summaries count mismatches) on SQLite, bzip2 and Lua at
#   1 ms, one run each: the core's semantics on this machine's CPU;
# - paired: target/device/paired/libbreakdance.so, a paired build
#   (src/paired.rs), on SQLite and Lua at (128, 3 ms), 3 runs each; its
#   paired.txt files are copied as paired-WORKLOAD-RUN.txt.
# - concurrent: paired builds that differ in what a run cannot switch
#   (a layout), compared in time: the builds named in CONCURRENT (each
#   target/device/NAME/libbreakdance.so, a paired build) run at once,
#   COPIES (default 4) processes each, each pinned to its own core, the
#   cores turning from round to round, so that the machine's drift falls
#   on all of them alike; 4 rounds of SQLite and of Lua at (128, 3 ms).
#   Files: concurrent-NAME-WORKLOAD-ROUND-COPY.txt (paired.txt).
set -u
D=target/device
BUILDS=${BUILDS:-before after}
ROUNDS=${ROUNDS:-7}
PARTS=${PARTS:-sqlite others}
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
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
read -r -a all <<< "$BUILDS"
last=${all[${#all[@]} - 1]}
lua_args=("$D/bench.lua" train 10)
if has verify; then
  for w in sqlite bzip2 lua; do
    case $w in
      sqlite) cmd=("$D/speedtest1" --memdb --testset main --size 25) ;;
      bzip2) cmd=("$D/bzip2" -c -9 "$D/text-train.txt") ;;
      lua) cmd=("$D/lua" "${lua_args[@]}") ;;
    esac
    [ -x "${cmd[0]}" ] || continue
    rm -rf "$OUT/tmp"
    env BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock BREAKDANCE_PERIOD=1000000 \
      BREAKDANCE_LBR=32 BREAKDANCE_LOOKAHEAD=verify BREAKDANCE_OUTPUT="$OUT/tmp" \
      LD_PRELOAD="$PWD/$D/$last/libbreakdance.so" "${cmd[@]}" > /dev/null 2>&1
    echo "verify $w: exit $?" >> "$OUT/verify.txt"
    cp "$OUT/tmp/summary.json" "$OUT/verify-$w-$last.json" 2>/dev/null
  done
fi
if has paired; then
  for r in 1 2 3; do
    for w in sqlite lua; do
      case $w in
        sqlite) cmd=("$D/speedtest1" --memdb --testset main --size 25) ;;
        lua) cmd=("$D/lua" "${lua_args[@]}") ;;
      esac
      [ -x "${cmd[0]}" ] || continue
      rm -rf "$OUT/tmp"
      env BREAKDANCE_MEASURE=emulate-paired BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock \
        BREAKDANCE_PERIOD=3000000 BREAKDANCE_LBR=128 BREAKDANCE_LOOKAHEAD=emulate \
        BREAKDANCE_OUTPUT="$OUT/tmp" LD_PRELOAD="$PWD/$D/paired/libbreakdance.so" "${cmd[@]}" > /dev/null 2>&1
      cp "$OUT/tmp/paired.txt" "$OUT/paired-$w-$r.txt" 2>/dev/null
    done
  done
fi
if has concurrent; then
  read -r -a cb <<< "${CONCURRENT:-}"
  copies=${COPIES:-4}
  n=$((${#cb[@]} * copies))
  for r in 1 2 3 4; do
    for w in sqlite lua; do
      case $w in
        sqlite) cmd=("$D/speedtest1" --memdb --testset main --size 25) ;;
        lua) cmd=("$D/lua" "${lua_args[@]}") ;;
      esac
      for ((k = 0; k < n; k++)); do
        b=${cb[$((k % ${#cb[@]}))]} copy=$((k / ${#cb[@]}))
        core=$(((k + r * copies) % $(nproc)))
        rm -rf "$OUT/tmp-$k"
        env BREAKDANCE_MEASURE=emulate-paired BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock \
          BREAKDANCE_PERIOD=3000000 BREAKDANCE_LBR=128 BREAKDANCE_LOOKAHEAD=emulate \
          BREAKDANCE_OUTPUT="$OUT/tmp-$k" LD_PRELOAD="$PWD/$D/$b/libbreakdance.so" \
          taskset -c "$core" "${cmd[@]}" > /dev/null 2>&1 &
      done
      wait
      for ((k = 0; k < n; k++)); do
        b=${cb[$((k % ${#cb[@]}))]} copy=$((k / ${#cb[@]}))
        cp "$OUT/tmp-$k/paired.txt" "$OUT/concurrent-$b-$w-$r-$copy.txt" 2>/dev/null
        rm -rf "$OUT/tmp-$k"
      done
    done
  done
fi
has sqlite && for r in $(seq 1 "$ROUNDS"); do
  for s in "32 1" "128 3" "128 10"; do
    set -- $s
    both sqlite "$1-$2ms" "$r" "$1" $(($2 * 1000000)) "$D/speedtest1" --memdb --testset main --size 25
  done
done
has others && for r in 1 2 3; do
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
    both lua 128-3ms "$r" 128 3000000 "$D/lua" "${lua_args[@]}"
  fi
done
rm -rf "$OUT/tmp"
echo done
