#!/usr/bin/env bash
# Instructions per emulated step, counted by callgrind: the in-process
# bench (`cargo bench --bench emulate`) on warm caches, N = 128, one round
# of 200 segments, only what `Emulator::run_with` executes. A count, not a
# time: this guest's noise does not reach it, so a change of a few
# instructions a step reads plainly. Where a step's time is its
# instructions (warm caches), it says what a change buys; cold steps wait
# on memory, which the paired build times (paired.sh).
#
#   results/speed/round11/instructions.sh REV... > out.csv
#
# Each REV (a commit, or "." for the working tree's tracked files) is
# checked out into a temporary worktree, with this checkout's
# benches/emulate.rs (the same workloads for every REV) and callgrind.patch
# applied: the bench cut to the one warm round, and x86-sem's addr32
# string probe answered without running (valgrind cannot decode those
# instructions).
# Needs valgrind (scripts/install-deps.sh).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: instructions.sh REV..." >&2; exit 2; }
command -v valgrind > /dev/null || { echo "instructions: valgrind missing (scripts/install-deps.sh)" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target/callgrind}
work=$(mktemp -d)
cleanup() {
  git -C "$root" worktree remove --force "$work/tree" 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
echo "rev,workload,steps_run,instructions,instructions_per_step"
for rev in "$@"; do
  commit=$rev
  if [ "$rev" = . ]; then
    commit=$(git -C "$root" stash create)
    [ -n "$commit" ] || commit=HEAD
  fi
  git -C "$root" worktree add -q --detach "$work/tree" "$commit"
  cp "$root/benches/emulate.rs" "$work/tree/benches/emulate.rs"
  git -C "$work/tree" apply "$here/callgrind.patch"
  bench=$(cd "$work/tree" && CARGO_TARGET_DIR=$target cargo bench --bench emulate --no-run --message-format=json 2> /dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "emulate" and m.get("executable"):
        print(m["executable"])')
  for w in mixed branchy sorting; do
    out=$(valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
      '--toggle-collect=*Emulator::run_with*' "$bench" "$w" 2>&1)
    # "... per step run (2048 per segment)": 200 segments were run.
    per=$(echo "$out" | sed -n 's/.*per step run (\([0-9]*\) per segment).*/\1/p')
    ir=$(echo "$out" | sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
    echo "$rev,$w,$((per * 200)),$ir,$(python3 -c "print(f'{$ir / ($per * 200):.1f}')")"
  done
  git -C "$root" worktree remove --force "$work/tree"
done
