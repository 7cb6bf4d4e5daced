/* A SIGPROF timer whose handler runs the same hot code as the main loop,
 * long enough to outlast a timer tick if every pass through it stopped:
 * a breakpoint the tracer armed in that code is also reached from the
 * handler, possibly while SIGTRAP is blocked. Arguments: iterations of the
 * main loop, and "full" to block every signal while the handler runs
 * (sigfillset), else none. Prints the main loop's result, which the
 * handler never changes. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static volatile unsigned sink;

__attribute__((noinline)) unsigned hot(unsigned x, int n) {
    for (int i = 0; i < n; i++) {
        if (x & 1)
            x = x * 3 + 1;
        else
            x = (x >> 1) ^ 0x5bd1e995u;
    }
    return x;
}

static void on_prof(int sig) { sink += hot((unsigned)sig, 3000); }

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_prof;
    sa.sa_flags = SA_RESTART;
    if (argc > 2 && strcmp(argv[2], "full") == 0)
        sigfillset(&sa.sa_mask);
    else
        sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, NULL) != 0)
        return 1;
    struct itimerval every = {{0, 200}, {0, 200}};
    if (setitimer(ITIMER_PROF, &every, NULL) != 0)
        return 1;
    unsigned x = 7;
    for (long i = 0; i < n; i++)
        x = hot(x, 100);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    printf("sigprof %ld %u\n", n, x);
    return 0;
}
