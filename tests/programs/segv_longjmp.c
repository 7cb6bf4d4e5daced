/* Calls through a function pointer read from memory; one call in four reads
 * it from an unmapped page, and the program's SIGSEGV handler recovers with
 * siglongjmp (as runtimes that probe memory do). The tracer's breakpoint on
 * that indirect jump makes its handler read the same unmapped slot first, so
 * the program's handler runs inside the tracer's and leaves it by longjmp.
 * Argument: CPU milliseconds to work. */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cpu_time.h"

typedef unsigned (*step_fn)(unsigned);

static sigjmp_buf recover;
static volatile sig_atomic_t faults;

static void on_segv(int sig) {
    (void)sig;
    faults++;
    siglongjmp(recover, 1);
}

__attribute__((noinline)) static unsigned step(unsigned x) {
    for (int i = 0; i < 50; i++)
        x = (x & 1) ? x * 3 + 1 : (x >> 1) ^ 0x2545f491u;
    return x;
}

/* Writable, so the tracer cannot resolve the call without a breakpoint. */
static step_fn good[1] = {step};

__attribute__((noinline)) static unsigned call_through(step_fn *slot, unsigned x) {
    return (*slot)(x);
}

int main(int argc, char **argv) {
    double budget = argc > 1 ? atof(argv[1]) : 500;
    step_fn *bad = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (bad == MAP_FAILED)
        return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_segv;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, NULL) != 0)
        return 1;
    static volatile unsigned x = 1;
    static volatile long calls;
    sigsetjmp(recover, 1);
    while (cpu_ms() < budget) {
        for (int i = 0; i < 256; i++) {
            calls++;
            x = call_through((calls & 3) == 0 ? bad : good, x);
        }
    }
    printf("segv-longjmp done, recovered: %s\n", faults > 0 ? "yes" : "no");
    return 0;
}
