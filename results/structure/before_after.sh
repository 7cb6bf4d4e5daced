#!/usr/bin/env bash
# Overhead of two builds of libbreakdance.so on the same workloads, runs
# interleaved (before, after, before, after, ...) so that the machine's
# drift falls on both alike. Each run preloads the library and autostarts a
# session on task-clock at 1 ms; the figure is the application's CPU time
# (user + system, from /proc's rusage via GNU time) over the native run's.
#
#   results/structure/before_after.sh BEFORE.so AFTER.so [ROUNDS]
#
# Needs: speedtest1 as bench-harness builds it (target/workloads), python3, xz.
set -euo pipefail
before=$1 after=$2 rounds=${3:-5}
root=$(cd "$(dirname "$0")/../.." && pwd)
speedtest=$root/target/workloads/build/sqlite/baseline/speedtest1
[ -x "$speedtest" ] || { echo "before_after: $speedtest missing: run bench-harness overhead --quick once" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
head -c 6000000 /dev/urandom | base64 > "$work/input"
cat > "$work/prog.py" <<'PY'
import json, re
d = [{"k": i, "v": str(i) * 5} for i in range(200000)]
json.loads(json.dumps(d))
print(sum(len(re.findall(r"[0-9]+", x["v"])) for x in d))
PY
declare -A cmds=(
  [sqlite]="$speedtest --memdb --testset main --size 25"
  [python3]="/usr/bin/python3 $work/prog.py"
  [xz]="/usr/bin/xz -c -6 $work/input"
)
cpu() { # prints user+sys seconds of one run of "$@" (env first)
  /usr/bin/time -o "$work/time" -f '%U %S' env "$@" >/dev/null 2>&1 || true
  awk '{printf "%.4f\n", $1 + $2}' "$work/time"
}
# Verify mode's checks of the emulator, from a run's summary.json:
# "checked/wrong" (wrong = mismatched transfers + mismatched registers).
verified() {
  python3 -c 'import json,sys
c=json.load(open(sys.argv[1]))
print("%d/%d" % (c.get("verify_checked", c.get("dataflow_verified", 0)),
  c.get("verify_mismatches", c.get("dataflow_mismatches", 0)) + c.get("verify_register_mismatches", 0)))' "$1/summary.json" 2>/dev/null || echo "-"
}
echo "workload,mode,round,native_s,before_s,after_s,before_verified,after_verified"
for w in sqlite python3 xz; do
  for mode in paper verify emulate; do
    for r in $(seq 1 "$rounds"); do
      n=$(cpu ${cmds[$w]})
      common=(BREAKDANCE_AUTOSTART=1 BREAKDANCE_EVENT=task-clock BREAKDANCE_PERIOD=1000000 BREAKDANCE_LOOKAHEAD=$mode)
      b=$(cpu "${common[@]}" BREAKDANCE_OUTPUT="$work/b" LD_PRELOAD="$before" ${cmds[$w]})
      a=$(cpu "${common[@]}" BREAKDANCE_OUTPUT="$work/a" LD_PRELOAD="$after" ${cmds[$w]})
      vb=-; va=-
      if [ "$mode" = verify ]; then vb=$(verified "$work/b"); va=$(verified "$work/a"); fi
      rm -rf "$work/a" "$work/b"
      echo "$w,$mode,$r,$n,$b,$a,$vb,$va"
    done
  done
done
