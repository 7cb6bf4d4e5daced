/* A deterministic program with one clearly hottest function (hot) and
 * one clearly hottest taken edge (hot's loop back-edge), a warm function
 * with a tenth of the work, and main. VARIANT changes the code (and so the
 * build id) without changing what it prints. */
#include <stdio.h>
#include <stdlib.h>

#ifndef VARIANT
#define VARIANT 0
#endif

__attribute__((noinline)) unsigned hot(unsigned n) {
    unsigned x = 1 + VARIANT;
    for (unsigned i = 0; i < n; i++)
        x = x * 1103515245u + 12345u + (x >> 7);
    return x - VARIANT;
}

__attribute__((noinline)) unsigned warm(unsigned n) {
    unsigned s = 0;
    for (unsigned i = 0; i < n; i++)
        s += (s ^ i) >> 3;
    return s;
}

int main(int argc, char **argv) {
    unsigned rounds = argc > 1 ? (unsigned)strtoul(argv[1], 0, 10) : 100;
    unsigned t = 0;
    for (unsigned r = 0; r < rounds; r++) {
        t += hot(100000 + (r & 1));
        t += warm(10000 + (r & 1));
    }
    printf("%u\n", t);
    return 0;
}
