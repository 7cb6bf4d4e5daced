/* sort_threads THREADS ROUNDS: each thread sorts ROUNDS arrays of 4096
 * pseudo-random integers with qsort (glibc's merge sort, recursive, an
 * indirect call per comparison) and folds them into a checksum; prints
 * the checksums' xor. The main thread only waits, so the process is never
 * quiet and every segment that reads memory is checked.
 *
 * A checkpoint in the recursion has hits at several depths: the kernel
 * writes the handler's signal frame below each earlier hit's stack
 * pointer, over slots the recursion stored, left and, deeper again, did
 * not store before the last hit. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int rounds;

static int cmp(const void *a, const void *b) {
  unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
  return (x > y) - (x < y);
}

static void *work(void *arg) {
  unsigned seed = (unsigned)(size_t)arg * 2654435761u + 1;
  unsigned *v = malloc(4096 * sizeof *v);
  unsigned long long sum = 0;
  if (!v)
    return NULL;
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < 4096; i++) {
      seed = seed * 1103515245u + 12345u;
      v[i] = seed >> 4;
    }
    qsort(v, 4096, sizeof *v, cmp);
    for (int i = 0; i < 4096; i += 64)
      sum = sum * 31 + v[i];
  }
  free(v);
  return (void *)(size_t)sum;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: sort_threads THREADS ROUNDS\n");
    return 2;
  }
  int n = atoi(argv[1]);
  rounds = atoi(argv[2]);
  pthread_t t[64];
  if (n < 1 || n > 64 || rounds < 0)
    return 2;
  for (int i = 0; i < n; i++)
    if (pthread_create(&t[i], NULL, work, (void *)(size_t)i) != 0)
      return 1;
  size_t x = 0;
  for (int i = 0; i < n; i++) {
    void *r;
    pthread_join(t[i], &r);
    x ^= (size_t)r;
  }
  printf("%zx\n", x);
  return 0;
}
