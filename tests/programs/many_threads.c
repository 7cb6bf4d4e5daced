/* N threads alive at once: each waits at a barrier until all exist, then
 * works, then waits again before exiting. Arguments: threads, iterations. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static long iterations = 2000;
static pthread_barrier_t barrier;

__attribute__((noinline)) static unsigned work(unsigned x, long n) {
    for (long i = 0; i < n; i++)
        x = (x & 1) ? x * 3 + 1 : (x >> 1) ^ 0x5bd1e995u;
    return x;
}

static void *body(void *arg) {
    unsigned *result = arg;
    pthread_barrier_wait(&barrier);
    *result = work(*result, iterations);
    pthread_barrier_wait(&barrier);
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 500;
    if (argc > 2)
        iterations = atol(argv[2]);
    pthread_t *threads = calloc(n, sizeof *threads);
    unsigned *results = calloc(n, sizeof *results);
    pthread_barrier_init(&barrier, NULL, n);
    for (int i = 0; i < n; i++) {
        results[i] = i + 1;
        if (pthread_create(&threads[i], NULL, body, &results[i]) != 0)
            return 1;
    }
    unsigned total = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(threads[i], NULL);
        total ^= results[i] * (unsigned)(i + 1);
    }
    printf("many-threads %d %u\n", n, total);
    return 0;
}
