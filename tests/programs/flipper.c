/* Memory another thread keeps changing, under a traced thread that branches
 * on it, with the traced thread's own record of which way it went.
 *
 * The flipper thread toggles `shared` between 0 and 1 with a short, varying
 * pause between flips. The main thread runs `iterations` rounds; round i
 * first announces its own number through 24 indirect calls, call b going to
 * bit_b_0 or bit_b_1 by bit b of i (so a trace names i from its entries
 * alone), then reads `shared` once and calls flag_0 or flag_1 by its value,
 * and writes that value to record[i]. At exit the record goes to the file
 * named by argv[2]: one byte per round.
 *
 * A trace entry that contradicts the record (round i announced, then the
 * call to flag_v with v != record[i]) is a branch the program did not
 * take. Arguments: rounds (at most 2^24), record file.
 *
 * Built with -DC11_THREADS the flipper thread is started by C11's
 * thrd_create, which the C library runs without its exported
 * pthread_create (no interposer sees it).
 *
 * Built with -DHANDLER_FLIPS there is no second thread: a SIGALRM handler
 * (installed with sigaction, a wall-clock interval timer of 1 ms) does
 * the flipping, between any two instructions of the one thread. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>
#include <stdlib.h>
#ifdef C11_THREADS
#include <threads.h>
#endif

static volatile int shared;
static volatile int done;
static volatile unsigned long sink;

#define BIT_FNS(b)                                                          \
    __attribute__((noinline)) static void bit_##b##_0(void) { sink += 2 * (b); } \
    __attribute__((noinline)) static void bit_##b##_1(void) { sink += 2 * (b) + 1; }
BIT_FNS(0) BIT_FNS(1) BIT_FNS(2) BIT_FNS(3) BIT_FNS(4) BIT_FNS(5)
BIT_FNS(6) BIT_FNS(7) BIT_FNS(8) BIT_FNS(9) BIT_FNS(10) BIT_FNS(11)
BIT_FNS(12) BIT_FNS(13) BIT_FNS(14) BIT_FNS(15) BIT_FNS(16) BIT_FNS(17)
BIT_FNS(18) BIT_FNS(19) BIT_FNS(20) BIT_FNS(21) BIT_FNS(22) BIT_FNS(23)

typedef void (*fn)(void);
#define PAIR(b) {bit_##b##_0, bit_##b##_1}
static fn volatile bits[24][2] = {
    PAIR(0), PAIR(1), PAIR(2), PAIR(3), PAIR(4), PAIR(5),
    PAIR(6), PAIR(7), PAIR(8), PAIR(9), PAIR(10), PAIR(11),
    PAIR(12), PAIR(13), PAIR(14), PAIR(15), PAIR(16), PAIR(17),
    PAIR(18), PAIR(19), PAIR(20), PAIR(21), PAIR(22), PAIR(23),
};

__attribute__((noinline)) static void flag_0(void) { sink += 100; }
__attribute__((noinline)) static void flag_1(void) { sink += 101; }
static fn volatile flags[2] = {flag_0, flag_1};

#ifdef HANDLER_FLIPS
static void on_alarm(int sig) {
    (void)sig;
    shared ^= 1;
}
#else
static void *flipper(void *arg) {
    (void)arg;
    unsigned long x = 88172645463325252ull;
    while (!done) {
        shared ^= 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for (unsigned long spin = x & 4095; spin > 0 && !done; spin--)
            __asm__ volatile("pause");
    }
    return NULL;
}

#ifdef C11_THREADS
static int flipper_c11(void *arg) {
    flipper(arg);
    return 0;
}
#endif
#endif

/* Calls out the 24 bits of i, one call per bit, unrolled. */
__attribute__((noinline)) static void announce(unsigned long i) {
#define CALL(b) bits[b][(i >> (b)) & 1]();
    CALL(0) CALL(1) CALL(2) CALL(3) CALL(4) CALL(5)
    CALL(6) CALL(7) CALL(8) CALL(9) CALL(10) CALL(11)
    CALL(12) CALL(13) CALL(14) CALL(15) CALL(16) CALL(17)
    CALL(18) CALL(19) CALL(20) CALL(21) CALL(22) CALL(23)
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: flipper ROUNDS RECORD-FILE\n");
        return 2;
    }
    unsigned long rounds = strtoul(argv[1], NULL, 10);
    if (rounds > (1ul << 24))
        rounds = 1ul << 24;
    unsigned char *record = calloc(rounds ? rounds : 1, 1);
#if defined(HANDLER_FLIPS)
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    struct itimerval every = {{0, 1000}, {0, 1000}};
    if (!record || sigaction(SIGALRM, &sa, NULL) != 0 || setitimer(ITIMER_REAL, &every, NULL) != 0) {
#elif defined(C11_THREADS)
    thrd_t t;
    if (!record || thrd_create(&t, flipper_c11, NULL) != thrd_success) {
#else
    pthread_t t;
    if (!record || pthread_create(&t, NULL, flipper, NULL) != 0) {
#endif
        fprintf(stderr, "flipper: cannot start\n");
        return 1;
    }
    unsigned long ones = 0;
    for (unsigned long i = 0; i < rounds; i++) {
        announce(i);
        int v = shared & 1;
        flags[v]();
        record[i] = (unsigned char)v;
        ones += v;
    }
    done = 1;
#if defined(HANDLER_FLIPS)
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
#elif defined(C11_THREADS)
    thrd_join(t, NULL);
#else
    pthread_join(t, NULL);
#endif
    FILE *f = fopen(argv[2], "wb");
    if (!f || fwrite(record, 1, rounds, f) != rounds || fclose(f) != 0) {
        fprintf(stderr, "flipper: cannot write %s\n", argv[2]);
        return 1;
    }
    printf("rounds %lu ones %lu\n", rounds, ones);
    return 0;
}
