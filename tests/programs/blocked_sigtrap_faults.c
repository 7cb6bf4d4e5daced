/* Faults taken with SIGTRAP blocked: the program blocks SIGTRAP, works a
 * little, then reads a page it made inaccessible; its SIGSEGV handler
 * checks that the fault is exactly that read (address and pc) and steps
 * over it.
 *
 * Under the tracer, a sample's SIGTRAP raised during the blocked work stays
 * pending (blocked). The kernel measured here (6.18) then delivers that
 * blocked SIGTRAP ahead of the read's SIGSEGV, and the SIGSEGV on top of
 * it, at the first instruction of the tracer's SIGTRAP handler: a program
 * handler given that context sees a fault that is not its own.
 *
 * Argument: CPU milliseconds to work. Prints whether every read faulted
 * exactly once, where it should. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "cpu_time.h"

/* touch(p): one byte read at p, then return. */
__asm__(".text\n"
        ".globl touch\n"
        ".type touch, @function\n"
        "touch:\n"
        ".globl touch_read\n"
        "touch_read:\n"
        "  movb (%rdi), %al\n"
        ".globl touch_after\n"
        "touch_after:\n"
        "  ret\n"
        ".size touch, . - touch\n");

void touch(const void *p);
extern const unsigned char touch_read[], touch_after[];

static volatile sig_atomic_t faults, wrong_faults;
static char *page;

static void on_segv(int sig, siginfo_t *info, void *ctx) {
    ucontext_t *uc = ctx;
    greg_t *r = uc->uc_mcontext.gregs;
    if (info->si_addr != (void *)page || r[REG_RIP] != (greg_t)touch_read) {
        /* Not the fault this program expects: die as it would natively. */
        wrong_faults++;
        signal(sig, SIG_DFL);
        return;
    }
    faults++;
    r[REG_RIP] = (greg_t)touch_after;
}

static volatile uint64_t sink;

/* Branchy work, a fixed amount: n iterations of a few nanoseconds. */
static void work(uint64_t seed, int n) {
    uint64_t x = seed, odd = 0;
    for (int i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        if (x >> 63)
            odd++;
    }
    sink = x + odd;
}

int main(int argc, char **argv) {
    double budget = argc > 1 ? atof(argv[1]) : 300;
    page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, NULL) != 0) {
        perror("sigaction");
        return 1;
    }
    sigset_t trap, old;
    sigemptyset(&trap);
    sigaddset(&trap, SIGTRAP);
    long calls = 0;
    double start = cpu_ms();
    while (cpu_ms() - start < budget) {
        /* Samples taken here are delivered at once. */
        work(calls, 200000);
        /* One raised here is held pending until the mask is restored,
         * and so is pending at the fault. This part is kept short: the
         * time a sample waits here counts as sampling off. */
        sigprocmask(SIG_BLOCK, &trap, &old);
        work(~calls, 25000);
        touch(page);
        calls++;
        sigprocmask(SIG_SETMASK, &old, NULL);
    }
    printf("calls == faults: %s\n", calls == faults ? "yes" : "no");
    return calls == faults ? 0 : 1;
}
