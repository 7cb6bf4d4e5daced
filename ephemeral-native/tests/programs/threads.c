/* Four threads run the same branches at once (shared counters, concurrent
 * hooks and unhooks); the output depends only on the work, and names how
 * many descriptors are open at start and at the end, so a descriptor the
 * library leaves open changes it. */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>

#define THREADS 4
#define N 300000L

static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  if (!d)
    return -1;
  while (readdir(d))
    n++;
  closedir(d);
  return n;
}

/* The volatile store in one arm keeps the branch a branch (no setcc). */
static __thread volatile long side;

__attribute__((noinline)) static long odd(long i) {
  if (i % 3 == 1) {
    side++;
    return 1;
  }
  return 0;
}

static void *work(void *arg) {
  long *result = arg;
  long acc = 0;
  for (long i = 0; i < N; i++)
    acc += odd(i);
  *result = acc;
  return NULL;
}

int main(void) {
  printf("fds at start %d\n", open_fds());
  pthread_t t[THREADS];
  long r[THREADS];
  for (int i = 0; i < THREADS; i++)
    pthread_create(&t[i], NULL, work, &r[i]);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < THREADS; i++)
    printf("thread %d: %ld\n", i, r[i]);
  printf("fds at end %d\n", open_fds());
  return 0;
}
