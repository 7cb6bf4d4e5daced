/* Forty phases, each in its own function that loops for good until a
 * SIGPROF handler leaves it by siglongjmp after a few milliseconds of CPU
 * time; no phase's code runs again. A trace waiting at a breakpoint in a
 * phase when it ends waits for a branch the thread never reaches again:
 * the tracer must give it up and go on sampling the next phases. A second
 * thread sleeps through the run, so that the process is not quiet and
 * emulate mode's segments wait at checkpoints too (in a quiet process they
 * need none). Argument: CPU milliseconds per phase. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define PHASES 40

static sigjmp_buf next_phase;

static void on_prof(int sig) {
    (void)sig;
    siglongjmp(next_phase, 1);
}

#define SPIN(n)                                                                \
    __attribute__((noinline)) static void spin##n(volatile unsigned *x) {      \
        for (;;) {                                                             \
            if (*x & 1) {                                                      \
                *x = *x * 3 + 1;                                               \
            } else {                                                           \
                /* Kept out of a cmov: a conditional branch per pass. */       \
                __asm__ volatile("" ::: "memory");                             \
                *x = (*x >> 1) ^ (0x9e3779b9u + 1##n);                         \
            }                                                                  \
        }                                                                      \
    }
#define SPIN10(d)                                                              \
    SPIN(d##0) SPIN(d##1) SPIN(d##2) SPIN(d##3) SPIN(d##4)                     \
    SPIN(d##5) SPIN(d##6) SPIN(d##7) SPIN(d##8) SPIN(d##9)
SPIN10(0) SPIN10(1) SPIN10(2) SPIN10(3)

#define NAME10(d)                                                              \
    spin##d##0, spin##d##1, spin##d##2, spin##d##3, spin##d##4, spin##d##5,    \
        spin##d##6, spin##d##7, spin##d##8, spin##d##9
static void (*const phases[PHASES])(volatile unsigned *) = {
    NAME10(0), NAME10(1), NAME10(2), NAME10(3)};

/* Takes no signal: SIGPROF is the process's, and must reach main. */
static void *sleeper(void *arg) {
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

int main(int argc, char **argv) {
    long ms = argc > 1 ? atol(argv[1]) : 15;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    if (pthread_create(&t, NULL, sleeper, NULL) != 0)
        return 1;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_prof;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, NULL) != 0)
        return 1;
    static volatile unsigned x = 1;
    volatile int done = 0;
    for (volatile int i = 0; i < PHASES; i++) {
        if (sigsetjmp(next_phase, 1) == 0) {
            struct itimerval once = {{0, 0}, {ms / 1000, (ms % 1000) * 1000}};
            if (setitimer(ITIMER_PROF, &once, NULL) != 0)
                return 1;
            phases[i](&x);
        }
        done++;
    }
    printf("abandoned_paths: %d of %d phases left by siglongjmp\n", done, PHASES);
    return 0;
}
