/* 16 threads, each doing its work in its own function work_N: 8 start at
 * once, the main thread works, then 8 more start. Argument: iterations per
 * thread. Prints a deterministic checksum. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static long iterations = 20000;

#define WORKER(n)                                                          \
    __attribute__((noinline)) static unsigned work_##n(unsigned x) {      \
        unsigned acc = (n);                                                \
        for (int i = 0; i < 32; i++) {                                     \
            if ((x >> (i & 7)) & 1)                                        \
                acc += x ^ (n##u * 0x9e3779b9u);                           \
            else                                                           \
                acc -= x >> ((n) % 5 + 1);                                 \
            x = x * 1664525u + 1013904223u + (n);                          \
        }                                                                  \
        return acc;                                                        \
    }                                                                      \
    static void *thread_##n(void *result) {                                \
        unsigned x = (n) + 1, sum = 0;                                     \
        for (long i = 0; i < iterations; i++) {                            \
            sum += work_##n(x);                                            \
            x += 0x10001u;                                                 \
        }                                                                  \
        *(unsigned *)result = sum;                                         \
        return NULL;                                                       \
    }

WORKER(0) WORKER(1) WORKER(2) WORKER(3) WORKER(4) WORKER(5) WORKER(6) WORKER(7)
WORKER(8) WORKER(9) WORKER(10) WORKER(11) WORKER(12) WORKER(13) WORKER(14) WORKER(15)

static void *(*const bodies[16])(void *) = {
    thread_0, thread_1, thread_2,  thread_3,  thread_4,  thread_5,  thread_6,  thread_7,
    thread_8, thread_9, thread_10, thread_11, thread_12, thread_13, thread_14, thread_15,
};

__attribute__((noinline)) static unsigned main_work(long n) {
    unsigned x = 3;
    for (long i = 0; i < n; i++)
        x = (x & 1) ? x * 3 + 1 : x / 2 + 0x12345u;
    return x;
}

int main(int argc, char **argv) {
    if (argc > 1)
        iterations = atol(argv[1]);
    pthread_t threads[16];
    unsigned results[16];
    for (int i = 0; i < 8; i++)
        if (pthread_create(&threads[i], NULL, bodies[i], &results[i]) != 0)
            return 1;
    unsigned main_result = main_work(iterations * 200);
    for (int i = 8; i < 16; i++)
        if (pthread_create(&threads[i], NULL, bodies[i], &results[i]) != 0)
            return 1;
    unsigned total = main_result;
    for (int i = 0; i < 16; i++) {
        pthread_join(threads[i], NULL);
        total ^= results[i] + (unsigned)i;
    }
    printf("threads %ld %u\n", iterations, total);
    return 0;
}
