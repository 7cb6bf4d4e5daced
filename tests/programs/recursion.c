/* Recursion: deep call/return chains. Argument: repetitions. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static unsigned long fib(unsigned n) {
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

__attribute__((noinline)) static unsigned walk(unsigned depth, unsigned x) {
    if (depth == 0)
        return x;
    if (x & 1)
        return walk(depth - 1, x * 3 + 1) + 1;
    return walk(depth - 1, x / 2) ^ depth;
}

int main(int argc, char **argv) {
    long repetitions = argc > 1 ? atol(argv[1]) : 20;
    unsigned long total = 0;
    for (long i = 0; i < repetitions; i++) {
        total += fib(20 + (unsigned)(i & 3));
        total += walk(200, (unsigned)i + 27);
    }
    printf("recursion %ld %lu\n", repetitions, total);
    return 0;
}
