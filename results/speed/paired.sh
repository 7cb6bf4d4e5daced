#!/usr/bin/env bash
# Paired timing of the emulation (src/paired.rs): a paired build of the
# library emulates each sample's trace with both versions of the code under
# test (A: `emulate::variant()` false, B: true), cold and warm, on the same
# registers. Prints one CSV row per run from its paired.txt.
#
#   CARGO_TARGET_DIR=target/paired cargo build --release -p breakdance --features paired
#   results/speed/paired.sh target/paired/release/libbreakdance.so [RUNS] > out.csv
#
# With nothing in the code asking `variant()` the build is an A/A test:
# its ratios are the method's own spread. To time a change, make its new
# path depend on `crate::emulate::variant()` in the paired build only, as
# results/speed/paired/round5.patch does for the fifth round's changes.
#
# WORKLOADS picks the programs (default: sqlite lua); SETTINGS the
# (branches, ms) pairs (default: "128 3" "128 10" "32 1"). The inputs are
# the harness's (see wrapped.sh).
set -euo pipefail
lib=$1 runs=${2:-4}
case "$lib" in
  *libbreakdance*) ;;
  *) echo "paired: $lib: the library activates only under a name containing libbreakdance" >&2; exit 2 ;;
esac
[ -f "$lib" ] || { echo "paired: $lib missing (see the header)" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
w=$root/target/workloads
declare -A cmd=(
  [lua]="$w/build/lua/baseline/lua $w/inputs-quick/bench.lua train 10"
  [sqlite]="$w/build/sqlite/baseline/speedtest1 --memdb --testset main --size 25"
)
workloads=${WORKLOADS:-sqlite lua}
settings=("128 3" "128 10" "32 1")
if [ -n "${SETTINGS:-}" ]; then
  IFS=',' read -r -a settings <<< "$SETTINGS"
fi
for k in $workloads; do
  first=${cmd[$k]%% *}
  [ -x "$first" ] || { echo "paired: $first missing (see wrapped.sh's header)" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
keys="traces steps traces_whose_steps_differed cold_ns_per_step_a cold_ns_per_step_b warm_ns_per_step_a warm_ns_per_step_b cold_b_over_a warm_b_over_a cold_b_over_a_median_trace warm_b_over_a_median_trace"
echo "workload,lbr,period_ms,run,$(echo $keys | tr ' ' ',')"
for r in $(seq 1 "$runs"); do
  for k in $workloads; do
    for s in "${settings[@]}"; do
      set -- $s
      rm -rf "$work/o"
      # shellcheck disable=SC2086 # the command's words
      env --default-signal BREAKDANCE_MEASURE=emulate-paired BREAKDANCE_AUTOSTART=1 \
        BREAKDANCE_EVENT=task-clock BREAKDANCE_PERIOD=$(($2 * 1000000)) BREAKDANCE_LBR=$1 \
        BREAKDANCE_LOOKAHEAD=emulate BREAKDANCE_OUTPUT="$work/o" LD_PRELOAD="$lib" \
        ${cmd[$k]} > /dev/null 2>&1
      [ -f "$work/o/paired.txt" ] || { echo "paired: no paired.txt: is $lib a paired build?" >&2; exit 1; }
      row="$k,$1,$2,$r"
      for key in $keys; do
        row="$row,$(awk -v k="$key" '$1 == k { print $2 }' "$work/o/paired.txt")"
      done
      echo "$row"
    done
  done
done
