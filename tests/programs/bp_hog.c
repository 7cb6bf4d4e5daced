/* Holds all four x86 debug registers of its main thread with its own
 * hardware breakpoints, then works until the file named by argv[1] exists.
 * A session started meanwhile cannot get a breakpoint slot. */
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile unsigned long sink;
__attribute__((noinline)) void spot0(void) { sink++; }
__attribute__((noinline)) void spot1(void) { sink += 2; }
__attribute__((noinline)) void spot2(void) { sink += 3; }
__attribute__((noinline)) void spot3(void) { sink += 4; }

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    void (*spots[4])(void) = {spot0, spot1, spot2, spot3};
    int held = 0;
    for (int i = 0; i < 4; i++) {
        struct perf_event_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.type = PERF_TYPE_BREAKPOINT;
        attr.size = sizeof attr;
        attr.bp_type = HW_BREAKPOINT_X;
        attr.bp_addr = (unsigned long)spots[i];
        attr.bp_len = sizeof(long);
        attr.disabled = 1;
        attr.exclude_kernel = 1;
        attr.exclude_hv = 1;
        if (syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0) >= 0)
            held++;
    }
    printf("held %d\n", held);
    fflush(stdout);
    unsigned long x = 1;
    while (access(argv[1], F_OK) != 0)
        for (int i = 0; i < 100000; i++)
            x = (x & 1) ? x * 3 + 1 : x >> 1;
    printf("done %d\n", x > 0);
    return 0;
}
