/* The application's own SIGTRAP handler, installed after the tracer
 * started, must see every SIGTRAP the application raises and no other.
 * Argument: number of raise(SIGTRAP) calls. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static volatile sig_atomic_t own_traps;
static volatile sig_atomic_t foreign_traps;

static void on_trap(int signal, siginfo_t *info, void *context) {
    (void)signal;
    (void)context;
    if (info->si_code == SI_TKILL || info->si_code == SI_USER)
        own_traps++;
    else
        foreign_traps++;
}

__attribute__((noinline)) static unsigned busy(unsigned x) {
    for (int i = 0; i < 20000; i++)
        x = (x & 1) ? x * 3 + 1 : x >> 1 ^ 0x5bd1e995u;
    return x;
}

int main(int argc, char **argv) {
    long raises = argc > 1 ? atol(argv[1]) : 2000;
    struct sigaction action = {0};
    action.sa_sigaction = on_trap;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGTRAP, &action, NULL) != 0)
        return 1;
    unsigned x = 1;
    for (long i = 0; i < raises; i++) {
        raise(SIGTRAP);
        x = busy(x);
    }
    printf("sigtrap own=%d foreign=%d x=%u\n", (int)own_traps, (int)foreign_traps, x);
    return 0;
}
