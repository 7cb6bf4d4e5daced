/* Reads of stack the program never wrote: `leftovers` makes a 4 KiB frame
 * with `sub rsp` and sums it without storing anything there, as compiled
 * code reads padding (gcc's `sub $8, %rsp` ... `pop %rsi` around a call
 * with an odd number of stack arguments) or an uninitialised local. A
 * sample in `main`'s loop, at a shallower rsp, wrote its signal frame over
 * those bytes, and its handler ran there: an emulation that starts there
 * reads the handler's stack, while the thread, once resumed, reads what
 * the handler left. The sum then decides a branch.
 *
 * Usage: dead_stack [CALLS]; prints how many calls it made (a count that
 * does not depend on what the stack held). */
#include <stdio.h>
#include <stdlib.h>

unsigned long leftovers(void);
__asm__(".text\n"
        ".globl leftovers\n"
        ".type leftovers, @function\n"
        "leftovers:\n"
        "  sub $4096, %rsp\n"
        "  xor %eax, %eax\n"
        "  .set off, 0\n"
        "  .rept 96\n"
        "  add off(%rsp), %rax\n"
        "  .set off, off + 40\n"
        "  .endr\n"
        "  add $4096, %rsp\n"
        "  ret\n"
        ".size leftovers, . - leftovers\n");

/* Work at main's depth, so that samples land above leftovers' frame. */
__attribute__((noinline)) static unsigned shallow(unsigned x) {
    for (int i = 0; i < 64; i++) {
        if (x & 1)
            x = x * 3 + 1;
        else
            x >>= 1;
    }
    return x;
}

int main(int argc, char **argv) {
    long calls = argc > 1 ? atol(argv[1]) : 200000;
    unsigned long odd = 0, even = 0;
    unsigned x = 27;
    for (long i = 0; i < calls; i++) {
        x = shallow(x + (unsigned)i);
        if (leftovers() & 1)
            odd++;
        else
            even++;
    }
    printf("%lu\n", odd + even);
    return 0;
}
