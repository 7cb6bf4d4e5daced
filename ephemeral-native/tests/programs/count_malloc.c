/* Preloaded before libephemeral.so in the allocation test: counts every
 * malloc, calloc and realloc of the process (the application's, the C
 * library's and the Rust library's alike) and writes the count to stderr
 * when the program's destructors run. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

static atomic_long count;

void *malloc(size_t n) {
  atomic_fetch_add(&count, 1);
  return __libc_malloc(n);
}

void *calloc(size_t a, size_t b) {
  atomic_fetch_add(&count, 1);
  return __libc_calloc(a, b);
}

void *realloc(void *p, size_t n) {
  atomic_fetch_add(&count, 1);
  return __libc_realloc(p, n);
}

__attribute__((destructor)) static void report(void) {
  char line[64];
  int len = snprintf(line, sizeof line, "allocations %ld\n", atomic_load(&count));
  if (len > 0)
    write(2, line, (size_t)len);
}
