/* A loop the emulation follows a little at a time: a run of about 2000
 * register-only steps (under 100 taken branches), then one read of memory
 * the main loop writes. With a second thread (asleep) the process is not
 * quiet, so that read needs a checkpoint, and a segment that went past its
 * step limit on the register-only run keeps only its start. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "cpu_time.h"

long shared[64];
static volatile long sink;

static void *sleeper(void *arg) {
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

__attribute__((noinline)) static long mix(long x) {
    for (int i = 0; i < 90; i++) {
        x = x * 6364136223846793005L + 1442695040888963407L;
        x ^= x >> 13; x += x << 7; x ^= x >> 17; x *= 31; x += 11;
        x ^= x >> 5; x += x << 3; x ^= x >> 29; x *= 7; x += 3;
        x ^= x >> 11; x += x << 9; x ^= x >> 23; x *= 13; x += 5;
    }
    return x;
}

/* Runs for argv[1] ms of the process's CPU (200 by default). */
int main(int argc, char **argv) {
    pthread_t t;
    if (pthread_create(&t, NULL, sleeper, NULL) != 0)
        return 2;
    double budget = argc > 1 ? atof(argv[1]) : 200;
    long x = 1;
    for (long r = 0; r % 1000 != 0 || cpu_ms() < budget; r++) {
        x = mix(x + shared[r & 63]);
        shared[(r + 1) & 63] = x;
    }
    sink = x;
    return 0;
}
