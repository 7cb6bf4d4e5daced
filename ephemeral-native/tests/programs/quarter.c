/* One branch of known bias: (i & 3) == 0 holds for exactly N/4 of N
 * iterations, in the noinline function so that the compiler cannot fold
 * it into the loop's own branch. Exit status 3 (not 0) so that a lost
 * status shows. */
#include <stdio.h>
#include <stdlib.h>

#define N 400000L
volatile long sink;

__attribute__((noinline)) static long step(long i) {
  if ((i & 3) == 0)
    return 1;
  sink += i;
  return 0;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : N;
  long hits = 0;
  for (long i = 0; i < n; i++)
    hits += step(i);
  printf("hits %ld of %ld\n", hits, n);
  return 3;
}
