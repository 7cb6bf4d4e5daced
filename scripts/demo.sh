#!/usr/bin/env bash
# The whole breakdance pipeline on a fresh machine, end to end:
#   install the tools, build the workspace, compile a demo program, record its
#   branches with profiler-ctl (which checks the build and writes the
#   llvm-profgen profile, --profgen), show where its time went (report),
#   make the create_llvm_prof profile too, record a frame-pointer build with
#   call stacks (record -g) for a context-sensitive (CSSPGO) profile,
#   rebuild the program with each profile, and compare the builds.
#
# Usage: scripts/demo.sh
# Environment: DEMO_PERIOD  sampling period for record -c (default 3000000:
#                           3 ms of task-clock without a PMU, where
#                           emulate mode's 128-branch traces end well
#                           before the next sample)
#              DEMO_ROUNDS  work the demo program does (default 6000, ~2.5 s)
# Work directory: target/demo/ (outputs in target/demo/out/). Exits non-zero,
# naming the step, if any step fails.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$root/target}
work=$root/target/demo
out=$work/out
period=${DEMO_PERIOD:-3000000}
rounds=${DEMO_ROUNDS:-6000}
cflags=(-O2 -gdwarf-4 -fdebug-info-for-profiling)
fp_cflags=("${cflags[@]}" -fno-omit-frame-pointer)

say() { printf '\n== demo: %s\n' "$*" >&2; }
fail() {
    printf 'demo.sh: step "%s" failed: %s\n' "$current" "$*" >&2
    exit 1
}
# step NAME COMMAND...: runs COMMAND; on failure the demo stops naming NAME.
step() {
    current=$1
    shift
    say "$current"
    "$@" || fail "exit status $?"
}
need_file() { [ -s "$1" ] || fail "$1 is missing or empty"; }

build_workspace() {
    command -v cargo >/dev/null || fail "cargo is not installed (install Rust, e.g. with rustup)"
    (cd "$root" && cargo build --release --workspace)
}

compile_demo() {
    mkdir -p "$work" || return
    clang-19 "${cflags[@]}" "$root/scripts/demo/demo.c" -o "$work/demo" || return
    clang-19 "${fp_cflags[@]}" "$root/scripts/demo/demo.c" -o "$work/demo.fp"
}

# record -g on the frame-pointer build: hybrid samples, from which
# --profgen writes a context-sensitive profile.
record_stacks() {
    rm -rf "$work/out-g" || return
    (cd "$work" && "$target_dir/release/profiler-ctl" record -g --profgen -c "$period" -o out-g -- ./demo.fp "$rounds") || return
    need_file "$work/out-g/demo.fp.prof"
    grep -q '^	' "$work/out-g/perf.script" || fail "$work/out-g/perf.script holds no call stack"
}

record_demo() {
    rm -rf "$out" || return
    (cd "$work" && "$target_dir/release/profiler-ctl" record --profgen -c "$period" -o out -- ./demo "$rounds") || return
    need_file "$out/perf.script"
    need_file "$out/demo.afdo.txt"
    need_file "$out/demo.prof"
    grep -q '/0x' "$out/perf.script" || fail "$out/perf.script holds no branch trace"
}

check_build() {
    (cd "$work" && "$target_dir/release/profiler-ctl" check ./demo out)
}

report() {
    (cd "$work" && "$target_dir/release/profiler-ctl" report out --top 5 --svg out/hot-paths.svg) >&2 || return
    need_file "$out/hot-paths.svg"
}

create_prof() {
    (cd "$work" && create_llvm_prof --profiler=text --profile=out/demo.afdo.txt --binary=./demo --out=out/demo.gcov) ||
        return
    need_file "$out/demo.gcov"
}

rebuild() {
    clang-19 "${cflags[@]}" -fprofile-sample-use="$out/demo.prof" "$root/scripts/demo/demo.c" -o "$work/demo.fdo" ||
        return
    clang-19 "${cflags[@]}" -fprofile-sample-use="$out/demo.gcov" "$root/scripts/demo/demo.c" -o "$work/demo.gcov-fdo" ||
        return
    clang-19 "${fp_cflags[@]}" -fprofile-sample-use="$work/out-g/demo.fp.prof" "$root/scripts/demo/demo.c" -o "$work/demo.csspgo"
}

# best_of3 PROGRAM: the best wall time of three runs in seconds; checks that
# every run prints the baseline's output ($expected).
best_of3() {
    local best="" start end output
    for _ in 1 2 3; do
        start=$EPOCHREALTIME
        output=$("$1" "$rounds") || fail "$1 exited with status $?"
        end=$EPOCHREALTIME
        [ "$output" = "$expected" ] || fail "$1 printed '$output', the baseline '$expected'"
        best=$(awk -v s="$start" -v e="$end" -v b="$best" 'BEGIN { t = e - s; if (b == "" || t < b) b = t; printf "%.3f", b }')
    done
    echo "$best"
}

compare_builds() {
    # A first run warms the caches and gives the output every build must print.
    expected=$("$work/demo" "$rounds") || return 1
    t_base=$(best_of3 "$work/demo") || return 1
    t_fdo=$(best_of3 "$work/demo.fdo") || return 1
    t_gcov=$(best_of3 "$work/demo.gcov-fdo") || return 1
    t_fp=$(best_of3 "$work/demo.fp") || return 1
    t_cs=$(best_of3 "$work/demo.csspgo") || return 1
}

hottest() {
    llvm-profdata-19 show --sample --topn=5 "$out/demo.prof" >"$out/topn.txt" || return
    sed -n '/considered hot functions/,$p' "$out/topn.txt" >&2
    # The demo's two hot functions are score_records (with the scorers it
    # calls, most of the time) and classify_text: a profile whose two
    # hottest are not those is wrong. Which of the two comes first is the
    # CPU's: counted by itself, score_records runs about as many
    # instructions as classify_text, and on an Intel Xeon guest the
    # samples put either first from one run to the next.
    top2=$(awk '/Function name$/ { getline; a = $NF; getline; print a, $NF; exit }' "$out/topn.txt")
    hot=${top2%% *}
    case "$top2" in
        "score_records classify_text" | "classify_text score_records") ;;
        *) fail "the two hottest functions in the profile are '${top2:-none}', not score_records and classify_text" ;;
    esac
}

current="start"
step "install dependencies (scripts/install-deps.sh)" bash "$root/scripts/install-deps.sh"
step "build the workspace (cargo build --release --workspace)" build_workspace
step "compile demo.c with clang-19 ${cflags[*]}" compile_demo
step "record: profiler-ctl record --profgen -c $period -o out -- ./demo $rounds" record_demo
step "check the build and the samples: profiler-ctl check ./demo out" check_build
step "where the time went: profiler-ctl report out --top 5 --svg out/hot-paths.svg" report
step "record with call stacks: profiler-ctl record -g --profgen -c $period -o out-g -- ./demo.fp $rounds" record_stacks
step "create_llvm_prof --profiler=text --profile=out/demo.afdo.txt --binary=./demo --out=out/demo.gcov" create_prof
step "rebuild demo with -fprofile-sample-use" rebuild
step "hottest functions (llvm-profdata-19 show --sample --topn=5)" hottest
step "run the builds (best of 3 each)" compare_builds

size() { stat -c %s "$1"; }
change() { awk -v b="${2:-$t_base}" -v f="$1" 'BEGIN { printf "%+.1f%%", 100 * (f - b) / b }'; }
say "summary"
cat >&2 <<EOF
work directory    $work
traces            out/perf.script, $(size "$out/perf.script") bytes, $(grep -c '/0x' "$out/perf.script") distinct traces
AutoFDO text      out/demo.afdo.txt, $(size "$out/demo.afdo.txt") bytes
llvm-profgen      out/demo.prof (record --profgen), $(size "$out/demo.prof") bytes
hot paths         out/hot-paths.svg
create_llvm_prof  out/demo.gcov, $(size "$out/demo.gcov") bytes
hottest function  $hot
output            $expected (the same from every build)
time, best of 3   -O2: ${t_base} s
                  -O2 -fprofile-sample-use=out/demo.prof: ${t_fdo} s ($(change "$t_fdo") time)
                  -O2 -fprofile-sample-use=out/demo.gcov: ${t_gcov} s ($(change "$t_gcov") time)
                  -O2 -fno-omit-frame-pointer: ${t_fp} s
                  the same, -fprofile-sample-use=out-g/demo.fp.prof (CSSPGO, record -g): ${t_cs} s ($(change "$t_cs" "$t_fp") time)
EOF
