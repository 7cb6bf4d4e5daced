/* Loads whose values are known: a value profile of `work` must find them.
 * table[i] reads 7 except at every 16th slot, where it reads 1000 + i (7
 * is read 15 times in 16), kinds[i] reads 100 + i % 4 (four values, a
 * quarter each), and constant reads 42 every time. The three sets of
 * values are disjoint, so a reader can tell the loads apart by their
 * values however the compiler unrolls the loop. The arrays are volatile so that each read is one scalar
 * load (no vector loads, no hoisting).
 *
 * Usage: values ROUNDS [thread|handler]: with `thread`, a second thread
 * sleeps through the run, which makes the process noisy for the tracer
 * (another thread could change the arrays at any instant), so its
 * checkpoints cannot be skipped; with `handler`, a SIGUSR1 handler is
 * installed (never called), which the tracer wraps and counts. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 4096

static volatile int table[N];
static volatile unsigned char kinds[N];
static volatile long constant = 42;

__attribute__((noinline)) static long work(long rounds) {
    long s = 0;
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < N; i++) {
            s += table[i];
            s ^= kinds[i];
            s += constant;
        }
    }
    return s;
}

static void *sleeper(void *arg) {
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

static void on_usr1(int sig) { (void)sig; }

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 1000;
    if (argc > 2 && strcmp(argv[2], "thread") == 0) {
        pthread_t t;
        if (pthread_create(&t, NULL, sleeper, NULL) != 0)
            return 2;
    } else if (argc > 2 && strcmp(argv[2], "handler") == 0) {
        signal(SIGUSR1, on_usr1);
    }
    for (int i = 0; i < N; i++) {
        table[i] = i % 16 == 0 ? 1000 + i : 7;
        kinds[i] = (unsigned char)(100 + i % 4);
    }
    printf("%ld\n", work(rounds));
    return 0;
}
