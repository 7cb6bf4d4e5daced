/* A deterministic branchy loop: the branch pattern comes from a fixed
 * xorshift sequence, so every run (native, under valgrind, under the tracer)
 * takes exactly the same branches. `hottest` runs most of the instructions;
 * `warm` and `cold` run less, by construction. Argument: outer iterations. */
#include <stdio.h>
#include <stdlib.h>

static unsigned long long state = 88172645463325252ull;

__attribute__((noinline)) static unsigned next_random(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (unsigned)state;
}

__attribute__((noinline)) static unsigned hottest(unsigned x) {
    unsigned acc = 0;
    for (int i = 0; i < 24; i++) {
        if (x & 1)
            acc += x >> 3;
        else
            acc -= x * 5;
        if ((x & 6) == 6)
            acc ^= 0x9e3779b9u;
        x = x * 1664525u + 1013904223u;
    }
    return acc;
}

__attribute__((noinline)) static unsigned warm(unsigned x) {
    unsigned acc = x;
    for (int i = 0; i < 6; i++) {
        if (acc % 3 == 0)
            acc = acc / 3 + 7;
        else
            acc = acc * 2 + 1;
    }
    return acc;
}

__attribute__((noinline)) static unsigned cold(unsigned x) {
    return x % 7 == 0 ? x / 7 : x + 11;
}

int main(int argc, char **argv) {
    long iterations = argc > 1 ? atol(argv[1]) : 200000;
    unsigned sum = 0;
    for (long i = 0; i < iterations; i++) {
        unsigned r = next_random();
        sum += hottest(r);
        if ((r & 3) == 0)
            sum += warm(r);
        if ((r & 31) == 5)
            sum += cold(r);
    }
    printf("branchy %ld %u\n", iterations, sum);
    return 0;
}
