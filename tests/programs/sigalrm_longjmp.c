/* A SIGALRM handler that leaves with siglongjmp every millisecond, while
 * the program works for a fixed amount of CPU time. Under the tracer the
 * signal may arrive while a trace is open or while the tracer's own SIGTRAP
 * handler runs: sampling must go on and the session must stop at exit.
 * Argument: CPU milliseconds to work. */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "cpu_time.h"

static sigjmp_buf again;
static volatile sig_atomic_t jumps;

static void on_alarm(int sig) {
    (void)sig;
    jumps++;
    siglongjmp(again, 1);
}

__attribute__((noinline)) static unsigned work(unsigned x) {
    for (int i = 0; i < 2000; i++)
        x = (x & 1) ? x * 3 + 1 : (x >> 1) ^ 0x9e3779b9u;
    return x;
}

int main(int argc, char **argv) {
    double budget = argc > 1 ? atof(argv[1]) : 500;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL) != 0)
        return 1;
    struct itimerval every_ms = {{0, 1000}, {0, 1000}};
    if (setitimer(ITIMER_REAL, &every_ms, NULL) != 0)
        return 1;
    static volatile unsigned x = 1;
    sigsetjmp(again, 1);
    while (cpu_ms() < budget)
        x = work(x);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("sigalrm-longjmp done, jumped: %s\n", jumps > 0 ? "yes" : "no");
    return 0;
}
