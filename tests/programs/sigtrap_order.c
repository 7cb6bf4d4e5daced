/* Whether this kernel delivers a blocked, pending SIGTRAP ahead of a
 * fault's SIGSEGV: SIGTRAP is blocked and one is queued with a positive
 * code (TRAP_PERF, as perf raises it), then a read of page 0 faults. If
 * the SIGSEGV handler finds the thread at the first instruction of the
 * SIGTRAP handler, the SIGTRAP was delivered first, though blocked.
 * Prints "first" or "in order". No tracer: run natively. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define TRAP_PERF_CODE 6

static void on_trap(int sig, siginfo_t *info, void *ctx) {
    (void)sig, (void)info, (void)ctx;
}

static void on_segv(int sig, siginfo_t *info, void *ctx) {
    (void)sig, (void)info;
    ucontext_t *uc = ctx;
    int first = uc->uc_mcontext.gregs[REG_RIP] == (greg_t)on_trap;
    const char *say = first ? "first\n" : "in order\n";
    write(1, say, strlen(say));
    _exit(0);
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_flags = SA_SIGINFO;
    sa.sa_sigaction = on_trap;
    sigaction(SIGTRAP, &sa, NULL);
    sa.sa_sigaction = on_segv;
    sigaction(SIGSEGV, &sa, NULL);
    sigset_t trap;
    sigemptyset(&trap);
    sigaddset(&trap, SIGTRAP);
    sigprocmask(SIG_BLOCK, &trap, NULL);
    siginfo_t info;
    memset(&info, 0, sizeof info);
    info.si_signo = SIGTRAP;
    info.si_code = TRAP_PERF_CODE;
    if (syscall(SYS_rt_tgsigqueueinfo, getpid(), gettid(), SIGTRAP, &info) != 0) {
        perror("rt_tgsigqueueinfo");
        return 1;
    }
    return *(volatile int *)8;
}
