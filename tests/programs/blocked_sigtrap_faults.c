/* Faults taken with SIGTRAP blocked: the program blocks SIGTRAP, works a
 * little, then takes a fault: in turn a read of a page it made
 * inaccessible (SIGSEGV), a division by zero (SIGFPE) and a ud2 (SIGILL).
 * Its handler checks that the fault is exactly the one expected (address
 * and pc) and steps over it.
 *
 * Under the tracer, a sample's SIGTRAP raised during the blocked work stays
 * pending (blocked). The kernel measured here (6.18) then delivers that
 * blocked SIGTRAP ahead of the fault's signal, and that signal on top of
 * it, at the first instruction of the tracer's SIGTRAP handler: a program
 * handler given that context sees a fault that is not its own.
 *
 * Argument: CPU milliseconds to work. Prints whether every fault came
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

/* touch(p): one byte read at p. divide(d): 1 / d (d is 0 here).
 * undefined(): ud2. Each faulting instruction has a label before and
 * after it, where the handler resumes. */
__asm__(".text\n"
        ".globl touch\n"
        ".type touch, @function\n"
        "touch:\n"
        "touch_at:\n"
        "  movb (%rdi), %al\n"
        "touch_after:\n"
        "  ret\n"
        ".size touch, . - touch\n"
        ".globl divide\n"
        ".type divide, @function\n"
        "divide:\n"
        "  mov $1, %eax\n"
        "  xor %edx, %edx\n"
        "divide_at:\n"
        "  divl %edi\n"
        "divide_after:\n"
        "  ret\n"
        ".size divide, . - divide\n"
        ".globl undefined\n"
        ".type undefined, @function\n"
        "undefined:\n"
        "undefined_at:\n"
        "  ud2\n"
        "undefined_after:\n"
        "  ret\n"
        ".size undefined, . - undefined\n"
        ".globl touch_at, touch_after, divide_at, divide_after\n"
        ".globl undefined_at, undefined_after\n");

void touch(const void *p);
unsigned divide(unsigned d);
void undefined(void);
extern const unsigned char touch_at[], touch_after[], divide_at[], divide_after[],
    undefined_at[], undefined_after[];

static volatile sig_atomic_t faults, wrong_faults;
static char *page;

/* Steps over the fault when it is the one expected for `sig`. */
static void on_fault(int sig, siginfo_t *info, void *ctx) {
    ucontext_t *uc = ctx;
    greg_t *r = uc->uc_mcontext.gregs;
    const unsigned char *at, *after;
    void *addr;
    switch (sig) {
    case SIGSEGV:
        at = touch_at, after = touch_after, addr = page;
        break;
    case SIGFPE:
        at = divide_at, after = divide_after, addr = (void *)divide_at;
        break;
    default:
        at = undefined_at, after = undefined_after, addr = (void *)undefined_at;
        break;
    }
    if (info->si_addr != addr || r[REG_RIP] != (greg_t)at) {
        /* Not the fault this program expects: die as it would natively. */
        wrong_faults++;
        signal(sig, SIG_DFL);
        return;
    }
    faults++;
    r[REG_RIP] = (greg_t)after;
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
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGSEGV, SIGFPE, SIGILL};
    for (int i = 0; i < 3; i++)
        if (sigaction(sigs[i], &sa, NULL) != 0) {
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
        switch (calls % 3) {
        case 0:
            touch(page);
            break;
        case 1:
            sink += divide(0);
            break;
        default:
            undefined();
            break;
        }
        calls++;
        sigprocmask(SIG_SETMASK, &old, NULL);
    }
    printf("calls == faults: %s\n", calls == faults ? "yes" : "no");
    return calls == faults ? 0 : 1;
}
