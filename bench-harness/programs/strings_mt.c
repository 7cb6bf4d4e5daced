/* A multi-threaded string-heavy workload: each thread sorts records with
 * qsort, formats them with snprintf and searches them with glibc's string
 * functions (memchr, strlen, strchr, strrchr, strcmp, wcslen, wmemchr),
 * the functions whose ifunc variant glibc picks by CPU feature.
 *
 * Arguments: threads, rounds per thread. Prints a deterministic checksum.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#define RECORDS 64

static long rounds = 20000;

static int by_text(const void *a, const void *b) {
    return strcmp((const char *)a, (const char *)b);
}

static void *work(void *arg) {
    unsigned seed = (unsigned)(size_t)arg * 2654435761u + 1, acc = 0;
    char records[RECORDS][40];
    wchar_t wide[RECORDS + 1];
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < RECORDS; i++) {
            seed = seed * 1664525u + 1013904223u;
            snprintf(records[i], sizeof records[i], "%c%05u:%x-%u", 'a' + (int)(seed >> 27),
                     seed >> 15 & 0xffff, seed & 0xfff, (unsigned)i);
            wide[i] = (wchar_t)('a' + (seed >> 20) % 26);
        }
        wide[RECORDS] = 0;
        qsort(records, RECORDS, sizeof records[0], by_text);
        for (int i = 0; i < RECORDS; i++) {
            const char *colon = memchr(records[i], ':', sizeof records[i]);
            const char *dash = strrchr(records[i], '-');
            acc += (unsigned)strlen(records[i]) + (colon ? (unsigned)(colon - records[i]) : 0u) +
                   (dash ? (unsigned)(dash - records[i]) : 0u) + (strchr(records[i], 'z') != NULL);
        }
        acc += (unsigned)wcslen(wide) + (wmemchr(wide, L'q', RECORDS) != NULL);
    }
    return (void *)(size_t)acc;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    if (argc > 2)
        rounds = atol(argv[2]);
    if (threads < 1 || threads > 256)
        return 2;
    pthread_t tids[256];
    for (int t = 0; t < threads; t++)
        if (pthread_create(&tids[t], NULL, work, (void *)(size_t)t) != 0)
            return 1;
    unsigned total = 0;
    for (int t = 0; t < threads; t++) {
        void *r;
        pthread_join(tids[t], &r);
        total += (unsigned)(size_t)r;
    }
    printf("strings_mt: %u\n", total);
    return 0;
}
