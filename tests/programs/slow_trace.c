/* A loop the emulation follows a little at a time: a run of about 2000
 * register-only steps (under 100 taken branches), then one read of memory
 * the loop does not write. With a second thread (asleep) the process is
 * not quiet, so that read needs a checkpoint, and a segment that went past
 * its step limit on the register-only run keeps only its start. With
 * `quiet` as the second argument there is no second thread: the read is
 * of the thread's own memory, and a segment is proven however long it
 * runs. Usage: slow_trace [CPU-MS [quiet]]. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_time.h"

long input[64];
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
    int quiet = argc > 2 && strcmp(argv[2], "quiet") == 0;
    if (!quiet && pthread_create(&t, NULL, sleeper, NULL) != 0)
        return 2;
    double budget = argc > 1 ? atof(argv[1]) : 200;
    for (int i = 0; i < 64; i++)
        input[i] = (long)i * argc;
    long x = 1;
    for (long r = 0; r % 1000 != 0 || cpu_ms() < budget; r++)
        x = mix(x + input[r & 63]);
    sink = x;
    return 0;
}
