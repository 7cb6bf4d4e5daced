#!/usr/bin/env bash
# brr's functional speed on a second, quiet machine (the device machine:
# no toolchain): two builds of brr-run alternated, on the static
# executables `cargo bench -p brr --bench mips` builds. Run from the
# repository root with target/device/brr holding old/brr-run,
# new/brr-run, charclass-gcc, charclass-clang, bzip2-gcc and
# bzip2-input.txt. Prints CSV: round,build,workload,instructions,mips.
set -u
D=target/device/brr
ROUNDS=${ROUNDS:-5}
echo "round,build,workload,instructions,mips"
for r in $(seq 1 "$ROUNDS"); do
  order="old new"; [ $((r % 2)) = 0 ] && order="new old"
  for b in $order; do
    for w in charclass-gcc charclass-clang bzip2-gcc; do
      if [ "$w" = bzip2-gcc ]; then
        line=$("$D/$b/brr-run" --stats "$D/$w" -c < "$D/bzip2-input.txt" 2>&1 >/dev/null | head -1)
      else
        line=$("$D/$b/brr-run" --stats "$D/$w" 2>&1 >/dev/null | head -1)
      fi
      # "brr-run: N instructions in T s (M MIPS), ..."
      n=$(echo "$line" | sed -n 's/^brr-run: \([0-9]*\) instructions.*/\1/p')
      m=$(echo "$line" | sed -n 's/.*(\([0-9.]*\) MIPS).*/\1/p')
      echo "$r,$b,$w,$n,$m"
    done
  done
done
