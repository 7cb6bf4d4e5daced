#!/usr/bin/env bash
# tests/programs/malloc_owners.c under each build in turns, ROUNDS times
# (default 10): one line per run with the build and the program's report
# (malloc calls made on the library's threads: all of them, those on the
# main arena, those through glibc's mmap path).
#
# usage: results/verify/indeterminate/malloc_owners.sh BUILD_DIR...
#   (each BUILD_DIR holds a libbreakdance.so, named by its basename)
set -eu
tmp=$(mktemp -d)
clang-19 -O2 -Wall -Werror "$(dirname "$0")/../../../tests/programs/malloc_owners.c" -o "$tmp/malloc_owners"
for ((r = 1; r <= ${ROUNDS:-10}; r++)); do
  for b in "$@"; do
    rm -rf "$tmp/out"
    report=$(LD_PRELOAD="$(realpath "$b")/libbreakdance.so" BREAKDANCE_AUTOSTART=1 \
      BREAKDANCE_OUTPUT="$tmp/out" BREAKDANCE_PERIOD=200000 BREAKDANCE_LBR=128 \
      "$tmp/malloc_owners" 3000 2>&1 >/dev/null)
    traces=$(python3 -c "import json; print(json.load(open('$tmp/out/summary.json'))['traces_written'])")
    echo "$(basename "$b") traces=$traces $report"
  done
done
rm -rf "$tmp"
