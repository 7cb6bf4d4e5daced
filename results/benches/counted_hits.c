/* What a breakpoint hit costs when the kernel counts it without a signal.
 * An execute breakpoint (perf_event_open, PERF_TYPE_BREAKPOINT, sigtrap)
 * on a function called N times; PERF_EVENT_IOC_PERIOD sets how many hits
 * make one SIGTRAP. Period 1: every hit is a stop (debug exception, signal,
 * handler, return). A period larger than N: every hit is only the debug
 * exception, counted by the kernel. Prints the traps and the thread CPU
 * per call.
 *
 * Build and run: clang-19 -O2 -o counted_hits counted_hits.c
 *                ./counted_hits PERIOD CALLS */
#define _GNU_SOURCE
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile int traps;

static void on_trap(int sig, siginfo_t *si, void *uc) {
    (void)sig, (void)si, (void)uc;
    traps++;
}

__attribute__((noinline)) int target(int x) {
    __asm__ volatile("");
    return x + 1;
}

static double thread_cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    uint64_t period = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
    int calls = argc > 2 ? atoi(argv[2]) : 100000;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGTRAP, &sa, NULL);
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_BREAKPOINT;
    a.bp_type = HW_BREAKPOINT_X;
    a.bp_addr = (uint64_t)target;
    a.bp_len = sizeof(long);
    a.sample_period = 1;
    a.disabled = 1;
    a.sigtrap = 1;
    a.remove_on_exec = 1;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    int fd = syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
    if (fd < 0) {
        perror("perf_event_open");
        return 1;
    }
    if (ioctl(fd, PERF_EVENT_IOC_PERIOD, &period) != 0) {
        perror("PERF_EVENT_IOC_PERIOD");
        return 1;
    }
    ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
    volatile int x = 0;
    double t0 = thread_cpu_ns();
    for (int i = 0; i < calls; i++)
        x = target(x);
    double t = thread_cpu_ns() - t0;
    printf("period %llu: %d calls, %d traps, %.2f us of CPU per call\n",
           (unsigned long long)period, calls, traps, t / calls / 1e3);
    return 0;
}
