/* Code that takes itself away: hide_self, alone in a page of this
 * program's text, runs a loop, then makes its own page inaccessible
 * (mprotect PROT_NONE: what a dlclose by another thread does to code, on a
 * page that stays reserved). The syscall returns to an address that can no
 * longer be read; the fetch there faults, and the program's SIGSEGV
 * handler completes the `ret` that could not be fetched. The main loop
 * makes the page executable again.
 *
 * A sample taken during that syscall is delivered on its return, with the
 * saved pc in the page just taken away, while the tracer's table of
 * executable mappings still lists it: the look-ahead decodes code that is
 * gone. A plain read there faults inside the tracer's handler and runs
 * this program's handler on the tracer's context.
 *
 * Argument: CPU milliseconds to work. Prints whether every call faulted
 * exactly once, at its own `ret`. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>

#include "cpu_time.h"

#define PAGE 4096

/* hide_self(page, PAGE): 20000 iterations of a loop, then
 * mprotect(rdi, rsi, PROT_NONE), then a ret that is never fetched (the
 * handler performs it). The section is exactly one page. */
__asm__(".pushsection .text.hide_self, \"ax\", @progbits\n"
        ".balign 4096\n"
        ".globl hide_self\n"
        ".type hide_self, @function\n"
        "hide_self:\n"
        "  mov $20000, %ecx\n"
        "1:\n"
        "  dec %ecx\n"
        "  jnz 1b\n"
        "  xor %edx, %edx\n"
        "  mov $10, %eax\n" /* SYS_mprotect */
        "  syscall\n"
        ".globl hide_self_ret\n"
        "hide_self_ret:\n"
        "  ret\n"
        ".size hide_self, . - hide_self\n"
        ".balign 4096, 0xcc\n"
        ".popsection\n");

void hide_self(void *page, size_t len);
extern const unsigned char hide_self_ret[];

static volatile sig_atomic_t faults, wrong_faults;

static void on_segv(int sig, siginfo_t *info, void *ctx) {
    ucontext_t *uc = ctx;
    greg_t *r = uc->uc_mcontext.gregs;
    if (info->si_addr != (void *)hide_self_ret || r[REG_RIP] != (greg_t)hide_self_ret) {
        /* Not the fault this program expects: die as it would natively. */
        wrong_faults++;
        signal(sig, SIG_DFL);
        return;
    }
    faults++;
    uint64_t *sp = (uint64_t *)r[REG_RSP];
    r[REG_RIP] = (greg_t)*sp;
    r[REG_RSP] += 8;
}

int main(int argc, char **argv) {
    double budget = argc > 1 ? atof(argv[1]) : 500;
    void *page = (void *)hide_self;
    if ((uintptr_t)page % PAGE != 0)
        return 2;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, NULL) != 0) {
        perror("sigaction");
        return 1;
    }
    long calls = 0;
    while (cpu_ms() < budget) {
        hide_self(page, PAGE);
        calls++;
        if (mprotect(page, PAGE, PROT_READ | PROT_EXEC) != 0) {
            perror("mprotect");
            return 1;
        }
    }
    printf("calls == faults: %s\n", calls == faults ? "yes" : "no");
    return calls == faults ? 0 : 1;
}
