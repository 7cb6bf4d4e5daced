/* The application's own SIGTRAP, raised while it blocks SIGTRAP, waits
 * while the thread runs over the tracer's breakpoint: the breakpoint's
 * SIGTRAPs merge into the application's (SIGTRAP is not queued), and the
 * tracer only sees a SIGTRAP that is not its own, which it passes on.
 * Each round: block SIGTRAP, raise it, run the work function, unblock
 * (the handler runs), run the work function again. Fixed work, so a
 * thread made to trap at every pass of its loop takes far longer rather
 * than doing less. Argument: rounds (default 3000). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static volatile sig_atomic_t traps;

static void on_trap(int sig) {
    (void)sig;
    traps++;
}

__attribute__((noinline)) static unsigned step(unsigned x) {
    for (int i = 0; i < 200; i++)
        x = (x & 1) ? x * 3 + 1 : (x >> 1) ^ 0x9e3779b9u;
    return x;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 3000;
    struct sigaction sa = {0};
    sa.sa_handler = on_trap;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTRAP, &sa, NULL) != 0)
        return 1;
    sigset_t trap;
    sigemptyset(&trap);
    sigaddset(&trap, SIGTRAP);
    unsigned x = 1;
    for (long r = 0; r < rounds; r++) {
        sigprocmask(SIG_BLOCK, &trap, NULL);
        raise(SIGTRAP);
        for (int k = 0; k < 20; k++)
            x = step(x);
        sigprocmask(SIG_UNBLOCK, &trap, NULL);
        for (int k = 0; k < 20; k++)
            x = step(x);
    }
    printf("blocked-raise done: %ld traps, checksum %u\n", (long)traps, x);
    return 0;
}
