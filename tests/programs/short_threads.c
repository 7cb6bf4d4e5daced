/* THREADS short-lived threads, BATCH at a time: each spins SPIN_US
 * microseconds of its own CPU time, then is joined. Prints how many
 * finished; the exit status says whether all did. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static unsigned long long thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void *work(void *arg) {
    unsigned long long spin_ns = (unsigned long long)(size_t)arg;
    unsigned long long t0 = thread_cpu_ns();
    volatile unsigned long long x = 0;
    while (thread_cpu_ns() - t0 < spin_ns)
        for (int i = 0; i < 100; i++)
            x += (unsigned long long)i * 7;
    return (void *)1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: short_threads THREADS BATCH SPIN_US\n");
        return 2;
    }
    int threads = atoi(argv[1]), batch = atoi(argv[2]);
    size_t spin_ns = (size_t)atoi(argv[3]) * 1000;
    pthread_t ids[256];
    if (batch < 1 || batch > 256)
        return 2;
    long done = 0;
    for (int made = 0; made < threads; made += batch) {
        int n = threads - made < batch ? threads - made : batch;
        for (int i = 0; i < n; i++)
            if (pthread_create(&ids[i], NULL, work, (void *)spin_ns) != 0)
                return 3;
        for (int i = 0; i < n; i++) {
            void *r;
            pthread_join(ids[i], &r);
            done += (long)(size_t)r;
        }
    }
    printf("threads done: %ld\n", done);
    return done == threads ? 0 : 1;
}
