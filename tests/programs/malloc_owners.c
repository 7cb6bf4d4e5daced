/* Who calls the C library's malloc, and on what memory.
 *
 * A single-threaded program (a quiet process to the tracer: its private
 * memory changes only by its own instructions) whose own malloc, free,
 * calloc, realloc and memalign forward to glibc's and note every call
 * made on another thread: the tracer's own threads, since the program
 * starts none. A call there that touches the main arena (a pointer in the
 * brk heap, given or returned) or that glibc serves with its own mmap
 * (128 KiB or more: it changes mp_.n_mmaps, which the main thread's
 * sysmalloc reads) changes memory the main thread's malloc reads while
 * the tracer emulates it as private. The program allocates and frees for
 * a while, then reports in a destructor, after the tracer's session
 * stopped at exit:
 *
 *   foreign=N main_arena=N mmapped=N first=ADDR
 *
 * foreign counts every call on another thread (those in threads' own
 * arenas included); first is the return address of the first call that
 * touched the main arena or mmapped, 0 if none. stdout carries only the
 * work's checksum, the same with and without the tracer.
 *
 * usage: malloc_owners [ROUNDS]
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

/* The end of the program's bss: the brk heap, the main arena's memory,
 * starts above it (at a random offset under ASLR) and ends at the break. */
extern char end;

#define MMAP_THRESHOLD (128 * 1024)

static unsigned long foreign, main_arena, mmapped;
static void *first;

/* The main thread's id is the process's. */
static int on_main_thread(void) { return syscall(SYS_gettid) == getpid(); }

static int in_brk_heap(const void *p) {
    return p != NULL && (const char *)p >= &end && (const char *)p < (const char *)sbrk(0);
}

/* A call on another thread: `given` is the pointer it was passed,
 * `size` what it asks for, `got` what it returned. */
static void note(const void *given, size_t size, const void *got, void *caller) {
    __atomic_add_fetch(&foreign, 1, __ATOMIC_RELAXED);
    int bad = 0;
    if (in_brk_heap(given) || in_brk_heap(got)) {
        __atomic_add_fetch(&main_arena, 1, __ATOMIC_RELAXED);
        bad = 1;
    }
    if (size >= MMAP_THRESHOLD) {
        __atomic_add_fetch(&mmapped, 1, __ATOMIC_RELAXED);
        bad = 1;
    }
    void *none = NULL;
    if (bad)
        __atomic_compare_exchange_n(&first, &none, caller, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

void *malloc(size_t size) {
    void *p = __libc_malloc(size);
    if (!on_main_thread())
        note(NULL, size, p, __builtin_return_address(0));
    return p;
}

void free(void *p) {
    if (p != NULL && !on_main_thread())
        note(p, 0, NULL, __builtin_return_address(0));
    __libc_free(p);
}

void *calloc(size_t n, size_t size) {
    void *p = __libc_calloc(n, size);
    if (!on_main_thread())
        note(NULL, n * size, p, __builtin_return_address(0));
    return p;
}

void *realloc(void *old, size_t size) {
    int main = on_main_thread();
    if (!main)
        note(old, size, NULL, __builtin_return_address(0));
    void *p = __libc_realloc(old, size);
    if (!main)
        note(NULL, 0, p, __builtin_return_address(0));
    return p;
}

void *memalign(size_t align, size_t size) {
    void *p = __libc_memalign(align, size);
    if (!on_main_thread())
        note(NULL, size, p, __builtin_return_address(0));
    return p;
}

void *aligned_alloc(size_t align, size_t size) { return memalign(align, size); }

int posix_memalign(void **out, size_t align, size_t size) {
    void *p = memalign(align, size);
    if (p == NULL)
        return 12; /* ENOMEM */
    *out = p;
    return 0;
}

__attribute__((destructor)) static void owners_report(void) {
    fprintf(stderr, "foreign=%lu main_arena=%lu mmapped=%lu first=%p\n",
            __atomic_load_n(&foreign, __ATOMIC_RELAXED), __atomic_load_n(&main_arena, __ATOMIC_RELAXED),
            __atomic_load_n(&mmapped, __ATOMIC_RELAXED), __atomic_load_n(&first, __ATOMIC_RELAXED));
}

/* Allocation churn the tracer samples: many sizes, some kept a while,
 * a few past the mmap threshold, so traces run through malloc's fast and
 * slow paths alike. */
int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 3000;
    enum { SLOTS = 256 };
    static void *slots[SLOTS];
    uint64_t x = 88172645463325252ull, sum = 0;
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < SLOTS; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            int k = (int)(x % SLOTS);
            free(slots[k]);
            size_t size = (x >> 20) % 1024 + 1;
            if ((x >> 40) % 512 == 0)
                size = MMAP_THRESHOLD + (x >> 50) % 4096;
            char *p = (x >> 30) % 3 == 0 ? calloc(1, size) : malloc(size);
            p[0] = (char)x;
            p[size - 1] = (char)(x >> 8);
            sum += (unsigned char)p[0] + (unsigned char)p[size - 1];
            slots[k] = p;
        }
    }
    for (int i = 0; i < SLOTS; i++)
        free(slots[i]);
    printf("%llu\n", (unsigned long long)sum);
    return 0;
}
