/* Threads with small stacks, and a measurement of how deep signal handlers
 * reach into a thread's stack.
 *
 * - SMALL threads run on stacks of PTHREAD_STACK_MIN bytes (16 KiB with
 *   glibc), as node's, musl's and many servers' threads are small: a tracer
 *   that registers them, samples them or stops them must fit beside them.
 * - One canary thread runs the same work on a 256 KiB stack of our own,
 *   filled with a pattern beforehand. After it ends, the lowest byte that
 *   no longer holds the pattern is its stack's high-water mark. Natively
 *   that is the work's own depth; under a tracer the difference is what the
 *   tracer's registration, the kernel's signal frames and its handlers
 *   added.
 *
 * Argument: rounds of work per thread. stdout gets a deterministic
 * checksum; the high-water mark and the kernel's signal frame size go to
 * the file named by STACK_REPORT, if set, as "high_water=N min_sigstack=N".
 */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <wchar.h>

#ifndef AT_MINSIGSTKSZ
#define AT_MINSIGSTKSZ 51
#endif

#define SMALL 4
#define CANARY_STACK (256 * 1024)
#define PATTERN 0xa5

static long rounds = 2000;

static int compare(const void *a, const void *b) {
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}

/* Branches, string functions, qsort and formatting: the work that takes
 * the emulator through glibc's ifunc-selected string code. */
__attribute__((noinline)) static unsigned work(unsigned seed) {
    char text[256];
    wchar_t wide[64];
    unsigned values[32], acc = seed;
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < 32; i++) {
            seed = seed * 1664525u + 1013904223u;
            values[i] = seed >> 8;
        }
        qsort(values, 32, sizeof values[0], compare);
        int n = snprintf(text, sizeof text, "%u-%u-%u:%x", values[0], values[15], values[31], seed);
        acc += (unsigned)n;
        const char *dash = memchr(text, '-', (size_t)n);
        acc += dash ? (unsigned)(dash - text) : 7u;
        acc += (unsigned)strlen(text) + (strrchr(text, ':') != NULL);
        for (int i = 0; i < 63; i++)
            wide[i] = (wchar_t)('a' + (values[i % 32] + (unsigned)i) % 26);
        wide[63] = 0;
        acc += (unsigned)wcslen(wide) + (wmemchr(wide, L'q', 63) != NULL);
        for (int i = 0; i < 32; i++)
            acc = (values[i] & 1) ? acc * 3 + values[i] : acc / 2 + 0x12345u;
    }
    return acc;
}

static void *run(void *arg) {
    unsigned *result = arg;
    *result = work(*result);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1)
        rounds = atol(argv[1]);

    pthread_attr_t small;
    pthread_attr_init(&small);
    if (pthread_attr_setstacksize(&small, PTHREAD_STACK_MIN) != 0)
        return 2;
    pthread_t threads[SMALL];
    unsigned results[SMALL + 1];
    for (int i = 0; i < SMALL; i++) {
        results[i] = (unsigned)i + 1;
        if (pthread_create(&threads[i], &small, run, &results[i]) != 0)
            return 3;
    }

    unsigned char *stack = mmap(NULL, CANARY_STACK, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED)
        return 4;
    memset(stack, PATTERN, CANARY_STACK);
    pthread_attr_t measured;
    pthread_attr_init(&measured);
    if (pthread_attr_setstack(&measured, stack, CANARY_STACK) != 0)
        return 5;
    pthread_t canary;
    results[SMALL] = 99;
    if (pthread_create(&canary, &measured, run, &results[SMALL]) != 0)
        return 6;

    unsigned total = 0;
    for (int i = 0; i < SMALL; i++) {
        pthread_join(threads[i], NULL);
        total += results[i];
    }
    pthread_join(canary, NULL);
    total += results[SMALL];

    size_t untouched = 0;
    while (untouched < CANARY_STACK && stack[untouched] == PATTERN)
        untouched++;
    const char *report = getenv("STACK_REPORT");
    if (report) {
        FILE *f = fopen(report, "w");
        if (!f)
            return 7;
        fprintf(f, "high_water=%zu min_sigstack=%lu\n", (size_t)CANARY_STACK - untouched,
                getauxval(AT_MINSIGSTKSZ));
        fclose(f);
    }
    printf("small stacks: %u\n", total);
    return 0;
}
