/* Indirect calls through a function-pointer table and a dense switch
 * (compiled to a jump table). Argument: iterations. */
#include <stdio.h>
#include <stdlib.h>

typedef unsigned (*operation)(unsigned);

__attribute__((noinline)) static unsigned op_add(unsigned x) { return x + 0x1234567u; }
__attribute__((noinline)) static unsigned op_mul(unsigned x) { return x * 2654435761u; }
__attribute__((noinline)) static unsigned op_xor(unsigned x) { return x ^ (x >> 11); }
__attribute__((noinline)) static unsigned op_rot(unsigned x) { return (x << 7) | (x >> 25); }
__attribute__((noinline)) static unsigned op_neg(unsigned x) { return ~x + 3; }
__attribute__((noinline)) static unsigned op_sub(unsigned x) { return x - (x >> 3); }

static operation table[8] = {op_add, op_mul, op_xor, op_rot, op_neg, op_sub, op_mul, op_add};

__attribute__((noinline)) static unsigned dispatch(unsigned x, unsigned selector, unsigned *acc) {
    switch (selector % 9) {
    case 0: *acc += x; return x + 1;
    case 1: *acc ^= x << 3; return x * 3;
    case 2: *acc -= x >> 2; return x ^ 0x55u;
    case 3: *acc += x * 7; return x + 0x100u;
    case 4: *acc = (*acc << 1) | (*acc >> 31); return x - 9;
    case 5: *acc ^= 0xdeadbeefu; return x ^ (x >> 5);
    case 6: *acc += *acc >> 4; return x * 5;
    case 7: *acc -= 3; return x + (x >> 1);
    default: *acc ^= x; return x + 17;
    }
}

int main(int argc, char **argv) {
    long iterations = argc > 1 ? atol(argv[1]) : 2000000;
    unsigned x = 12345, acc = 0, r = 1;
    for (long i = 0; i < iterations; i++) {
        /* An LCG picks the table entry and the switch case, so every
         * target runs, in a fixed order. */
        r = r * 1103515245u + 12345u;
        x = table[(r >> 16) & 7](x);
        x = dispatch(x, r >> 20, &acc);
    }
    printf("indirect %ld %u %u\n", iterations, x, acc);
    return 0;
}
