/* What a one-shot task-clock event counts after its handler renews it with
 * PERF_EVENT_IOC_REFRESH alone (mode 0) or PERIOD and then REFRESH (mode
 * 1). The handler spins SPIN_NS (wall clock, in user mode) before it
 * renews the event; printed is the time from each handler's return to the
 * next sample. A whole period (3 ms) in both modes means that the kernel
 * keeps what was left of the period when the overflow disabled the event,
 * and that the handler's time is not counted. The main loop reads the
 * clock through the vDSO: a loop of system calls is seldom sampled with
 * exclude_kernel (a sample that lands in the kernel is skipped, and the
 * next comes a period later).
 * Build: cc -O2 refresh_period.c; run: ./a.out MODE SPIN_NS. */
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PERIOD_NS 3000000
#define KEPT 64

static int fd, samples, mode;
static long spin_ns;
static long entered[KEPT], left[KEPT];

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void on_trap(int sig, siginfo_t *info, void *uc) {
    (void)sig, (void)info, (void)uc;
    long in = now_ns();
    while (now_ns() - in < spin_ns)
        ;
    if (mode == 1) {
        unsigned long period = PERIOD_NS;
        ioctl(fd, PERF_EVENT_IOC_PERIOD, &period);
    }
    ioctl(fd, PERF_EVENT_IOC_REFRESH, 1);
    if (samples < KEPT) {
        entered[samples] = in;
        left[samples] = now_ns();
    }
    samples++;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODE SPIN_NS\n", argv[0]);
        return 2;
    }
    mode = atoi(argv[1]);
    spin_ns = atol(argv[2]);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGTRAP, &sa, 0);
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.sample_period = PERIOD_NS;
    a.disabled = 1;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    a.sigtrap = 1;
    a.remove_on_exec = 1;
    a.sig_data = 1;
    fd = syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
    if (fd < 0) {
        perror("perf_event_open");
        return 1;
    }
    long start = now_ns();
    ioctl(fd, PERF_EVENT_IOC_REFRESH, 1);
    while (now_ns() - start < 1000000000L)
        ;
    printf("mode %d, handler %ld us: %d samples in 1 s; return to next sample (us):", mode,
           spin_ns / 1000, samples);
    for (int i = 1; i < 12 && i < samples && i < KEPT; i++)
        printf(" %ld", (entered[i] - left[i - 1]) / 1000);
    printf("\n");
    return 0;
}
