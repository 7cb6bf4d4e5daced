/* CPU time of the whole process so far, in milliseconds: the test programs
 * that work for a CPU budget stop by it, so that a slower machine does the
 * same amount of sampled work, not less. */
#ifndef BREAKDANCE_TEST_CPU_TIME_H
#define BREAKDANCE_TEST_CPU_TIME_H
#include <time.h>

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
#endif
