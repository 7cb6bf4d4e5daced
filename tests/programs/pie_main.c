/* A PIE whose work is mostly in libwork.so. Argument: iterations. */
#include <stdio.h>
#include <stdlib.h>

unsigned lib_hot(unsigned x);
unsigned lib_light(unsigned x);

/* The executable's hottest function: more work per call than main's loop. */
__attribute__((noinline)) static unsigned main_step(unsigned x) {
    for (int i = 0; i < 8; i++)
        x = (x & 8) ? x + 3 : (x ^ 0x77u) * 5;
    return x;
}

int main(int argc, char **argv) {
    long iterations = argc > 1 ? atol(argv[1]) : 1000000;
    unsigned x = 7, sum = 0;
    for (long i = 0; i < iterations; i++) {
        x = main_step(x + (unsigned)i);
        sum += lib_hot(x);
        if ((i & 7) == 0)
            sum += lib_light(x);
    }
    printf("pie %ld %u\n", iterations, sum);
    return 0;
}
