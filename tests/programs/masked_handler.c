/* A SIGPROF handler installed with every signal masked (sa_mask full, as
 * many programs install theirs), so SIGTRAP is blocked while it runs. It
 * first works for longer than a sampling period without touching the main
 * loop's code, so a sample falls due and waits blocked; then it runs the
 * main loop's own function many times, passing wherever the tracer's
 * breakpoint waits. Those hits raise SIGTRAPs while the sample's waits,
 * and SIGTRAP is not queued: they merge into it, and the handler that
 * takes the sample never learns that the breakpoint event spent them.
 * Arguments: CPU milliseconds to work, the handler's spin in microseconds
 * of CPU (default 1500). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "cpu_time.h"

static volatile unsigned sink;
static volatile sig_atomic_t alarms;
static double spin_ms = 1.5;

__attribute__((noinline)) static unsigned step(unsigned x) {
    for (int i = 0; i < 200; i++)
        x = (x & 1) ? x * 3 + 1 : (x >> 1) ^ 0x9e3779b9u;
    return x;
}

/* Work of another shape: no call of step(). */
__attribute__((noinline)) static unsigned spin(double ms) {
    double until = cpu_ms() + ms;
    unsigned y = 7;
    while (cpu_ms() < until)
        for (int i = 0; i < 1000; i++)
            y = y * 1103515245u + 12345u;
    return y;
}

static void on_prof(int sig) {
    (void)sig;
    alarms++;
    unsigned x = spin(spin_ms);
    for (int i = 0; i < 200; i++)
        x = step(x);
    sink = x;
}

int main(int argc, char **argv) {
    double budget = argc > 1 ? atof(argv[1]) : 1000;
    if (argc > 2)
        spin_ms = atof(argv[2]) / 1000;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_prof;
    sigfillset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGPROF, &sa, NULL) != 0)
        return 1;
    struct itimerval every = {{0, 5000}, {0, 5000}};
    if (setitimer(ITIMER_PROF, &every, NULL) != 0)
        return 1;
    unsigned x = 1;
    while (cpu_ms() < budget)
        for (int k = 0; k < 64; k++)
            x = step(x);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    sink = x;
    printf("masked-handler done, alarms: %s\n", alarms > 0 ? "yes" : "no");
    return 0;
}
