/* What a program sees of its own signal actions, printed so that a run
 * under the tracer (which wraps asynchronous handlers) can be compared
 * with a native one: the actions read back as installed (handler, flags,
 * mask), signal's return values, handlers run with their own arguments
 * and mask, SA_RESETHAND resetting after one delivery (SIGURG, ignored by
 * default), SA_NODEFER letting a handler take its own signal again, and an action replaced by SIG_IGN
 * and back. Runs for argv[1] ms of CPU in between (for samples to land).
 * Exit status 0 when every check held, 1 otherwise. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_time.h"

static volatile sig_atomic_t usr1_runs, usr2_runs, nested, hup_runs, urg_runs;
static volatile int usr2_code, usr1_blocked_usr2;
static int failures;

static void check(int ok, const char *what) {
    printf("%s: %s\n", what, ok ? "ok" : "FAILED");
    if (!ok)
        failures++;
}

static void on_usr1(int sig) {
    (void)sig;
    usr1_runs++;
    sigset_t now;
    sigprocmask(SIG_BLOCK, NULL, &now);
    usr1_blocked_usr2 = sigismember(&now, SIGUSR2) && sigismember(&now, SIGUSR1);
}

static void on_usr2(int sig, siginfo_t *info, void *ctx) {
    (void)ctx;
    usr2_runs++;
    usr2_code = info->si_signo == sig ? info->si_code : -1000;
}

static void on_hup(int sig) {
    (void)sig;
    hup_runs++;
}

static void on_urg(int sig) {
    (void)sig;
    urg_runs++;
}

static void on_alrm(int sig) {
    /* SA_NODEFER: the signal can come in again while this runs. */
    if (nested++ == 0)
        raise(sig);
}

static volatile unsigned long sink;

static void work(double ms) {
    double end = cpu_ms() + ms;
    unsigned long x = 1;
    while (cpu_ms() < end)
        for (int i = 0; i < 10000; i++)
            x = x * 6364136223846793005ul + (x >> 7);
    sink = x;
}

int main(int argc, char **argv) {
    double ms = argc > 1 ? atof(argv[1]) : 50;

    struct sigaction a, b;
    memset(&a, 0, sizeof a);
    a.sa_handler = on_usr1;
    a.sa_flags = SA_RESTART;
    sigemptyset(&a.sa_mask);
    sigaddset(&a.sa_mask, SIGUSR2);
    check(sigaction(SIGUSR1, &a, NULL) == 0, "install usr1");
    memset(&b, 0, sizeof b);
    check(sigaction(SIGUSR1, NULL, &b) == 0, "query usr1");
    check(b.sa_handler == on_usr1, "usr1 handler reads back");
    check((b.sa_flags & (SA_RESTART | SA_SIGINFO | SA_NODEFER | SA_RESETHAND)) == SA_RESTART,
          "usr1 flags read back");
    check(sigismember(&b.sa_mask, SIGUSR2) && !sigismember(&b.sa_mask, SIGHUP),
          "usr1 mask reads back");

    memset(&a, 0, sizeof a);
    a.sa_sigaction = on_usr2;
    a.sa_flags = SA_SIGINFO;
    sigemptyset(&a.sa_mask);
    check(sigaction(SIGUSR2, &a, &b) == 0, "install usr2");
    check(b.sa_handler == SIG_DFL, "usr2 was default");

    check(signal(SIGHUP, on_hup) == SIG_DFL, "signal hup returns the default");
    check(signal(SIGHUP, SIG_IGN) == on_hup, "signal hup returns its handler");
    check(signal(SIGHUP, on_hup) == SIG_IGN, "signal hup returns ignore");

    memset(&a, 0, sizeof a);
    a.sa_handler = on_alrm;
    a.sa_flags = SA_NODEFER;
    sigemptyset(&a.sa_mask);
    check(sigaction(SIGALRM, &a, NULL) == 0, "install alrm");
    /* SIGURG's default is to ignore it: a second one after the reset is
     * harmless. */
    memset(&a, 0, sizeof a);
    a.sa_handler = on_urg;
    a.sa_flags = SA_RESETHAND;
    sigemptyset(&a.sa_mask);
    check(sigaction(SIGURG, &a, NULL) == 0, "install urg");

    work(ms / 2);
    raise(SIGUSR1);
    check(usr1_runs == 1, "usr1 ran once");
    check(usr1_blocked_usr2, "usr1 ran with its mask and itself blocked");
    raise(SIGUSR2);
    check(usr2_runs == 1 && usr2_code == SI_TKILL, "usr2 ran with its siginfo");
    raise(SIGHUP);
    check(hup_runs == 1, "hup ran");
    raise(SIGALRM);
    check(nested == 2, "alrm ran again inside itself (SA_NODEFER)");
    raise(SIGURG);
    raise(SIGURG);
    check(urg_runs == 1, "urg ran once (SA_RESETHAND)");
    memset(&b, 0, sizeof b);
    sigaction(SIGURG, NULL, &b);
    check(b.sa_handler == SIG_DFL, "urg reset to default after one delivery");

    check(signal(SIGUSR1, SIG_IGN) == on_usr1, "usr1 ignored");
    raise(SIGUSR1);
    check(usr1_runs == 1, "ignored usr1 did not run");
    memset(&a, 0, sizeof a);
    a.sa_handler = on_usr1;
    check(sigaction(SIGUSR1, &a, &b) == 0 && b.sa_handler == SIG_IGN, "usr1 back from ignore");
    work(ms / 2);
    raise(SIGUSR1);
    check(usr1_runs == 2, "usr1 ran again");

    printf("failures: %d\n", failures);
    return failures != 0;
}
