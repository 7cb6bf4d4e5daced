# Sourced by the run-*.sh scripts here: SQLite's speedtest1 on its
# evaluation input, the tracer of this checkout, and two helpers.
ROOT=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
B=$ROOT/target/workloads/build/sqlite/baseline/speedtest1
ARGS="--memdb --testset main --size 70 --primarykey"
CTL=$ROOT/target/release/profiler-ctl
# cpu CMD...: the CPU seconds (user + system) CMD used.
cpu() { /usr/bin/time -f "%U %S" "$@" 2>&1 >/dev/null | tail -1 | awk '{print $1+$2}'; }
# field DIR NAME: counter NAME of the recording in DIR.
field() { grep -o "\"$2\":[0-9]*" "$1/summary.json" | head -1 | cut -d: -f2; }
