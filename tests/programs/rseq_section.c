/* A hot loop declared an rseq critical section: a record in the __rseq_cs
 * section covers [rseq_loop, rseq_loop_end). The tracer must never stop
 * inside it (a breakpoint there would make the kernel abort a real rseq
 * sequence on every stop). Prints the section's runtime bounds on stderr. */
#include <stdio.h>
#include <stdlib.h>

unsigned long rseq_loop(unsigned long n);
extern char rseq_loop_end[];

__asm__(".text\n"
        ".globl rseq_loop\n"
        ".type rseq_loop, @function\n"
        "rseq_loop:\n"
        "  xor %eax, %eax\n"
        "1:\n"
        "  add %rdi, %rax\n"
        "  test $1, %dil\n"
        "  jz 2f\n"
        "  xor $0x55, %rax\n"
        "2:\n"
        "  dec %rdi\n"
        "  jnz 1b\n"
        "  ret\n"
        ".globl rseq_loop_end\n"
        "rseq_loop_end:\n"
        "  nop\n"
        ".pushsection __rseq_cs, \"aw\"\n"
        ".balign 32\n"
        "  .long 0, 0\n"
        "  .quad rseq_loop, rseq_loop_end - rseq_loop, rseq_loop_end\n"
        ".popsection\n");

__attribute__((noinline)) static unsigned long outside(unsigned long x) {
    for (int i = 0; i < 200; i++)
        x = (x & 1) ? x * 3 + 1 : x >> 1;
    return x;
}

int main(int argc, char **argv) {
    unsigned long rounds = argc > 1 ? strtoul(argv[1], 0, 10) : 3000;
    unsigned long acc = 0;
    fprintf(stderr, "rseq section %p %p\n", (void *)rseq_loop, (void *)rseq_loop_end);
    for (unsigned long r = 0; r < rounds; r++)
        acc += rseq_loop(20000) ^ outside(r);
    printf("%lu\n", acc);
    return 0;
}
