/* A rep movsb met when the tracer's store overlay is nearly full: `fill`
 * stores 250 distinct qwords (unrolled, no branch), then copies 512 bytes
 * with rep movsb. A segment that starts before the stores reaches the copy
 * with room for a few qwords more; the copy's first emulated step stops
 * after a few iterations, which it keeps (x86_sem's contract for rep
 * string instructions). That state is no arrival a breakpoint can meet: a
 * checkpoint there would predict rcx part-way down while the CPU stops at
 * the copy's start with the whole count.
 *
 * Usage: rep_after_stores [ROUNDS]; prints a checksum. */
#include <stdio.h>
#include <stdlib.h>

static unsigned long scratch[256];
static char src[512], dst[512];

void fill(unsigned long *a, char *to, const char *from, unsigned long v);
__asm__(".text\n"
        ".globl fill\n"
        ".type fill, @function\n"
        "fill:\n"
        "  .set off, 0\n"
        "  .rept 250\n"
        "  mov %rcx, off(%rdi)\n"
        "  .set off, off + 8\n"
        "  .endr\n"
        "  mov %rsi, %rdi\n"
        "  mov %rdx, %rsi\n"
        "  mov $512, %ecx\n"
        "  rep movsb\n"
        "  ret\n"
        ".size fill, . - fill\n");

int main(int argc, char **argv) {
  long rounds = argc > 1 ? atol(argv[1]) : 2000000;
  unsigned long sum = 0;
  for (long r = 0; r < rounds; r++) {
    fill(scratch, dst, src, (unsigned long)r);
    src[r % 512] = (char)r;
    sum += (unsigned char)dst[(r * 7) % 512] + scratch[r % 250];
  }
  printf("%lu\n", sum);
  return 0;
}
