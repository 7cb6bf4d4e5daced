/* Instructions that meet the tracer's store overlay full part-way: each
 * round stores 250 distinct qwords (unrolled, no branch) and then, with
 * `rep`, copies 512 bytes with rep movsb, or, with `vector`, makes eight
 * unaligned 16-byte stores (movdqu, three qwords each) to qwords not yet
 * stored. A segment that starts before the scalar stores reaches the copy
 * or the vector stores with room for a few qwords more (the overlay holds
 * 256), and stops there.
 *
 * - rep: the copy's first emulated step stops after a few iterations and
 *   keeps them (x86_sem's contract for rep string instructions). That
 *   state is no arrival a breakpoint can meet: a checkpoint there would
 *   predict rcx part-way down while the CPU stops at the copy's start.
 * - vector: a 16-byte store whose first 8 bytes fit and last do not. Had
 *   its first half gone into the overlay, the checkpoint before the store
 *   would find real memory without it.
 *
 * Usage: full_overlay rep|vector [ROUNDS]; prints a checksum. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned long scratch[300];
static char src[512], dst[512];

void fill_copy(unsigned long *a, char *to, const char *from, unsigned long v);
void fill_vector(unsigned long *a, unsigned long v);
__asm__(".text\n"
        ".globl fill_copy\n"
        ".type fill_copy, @function\n"
        "fill_copy:\n"
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
        ".size fill_copy, . - fill_copy\n"
        ".globl fill_vector\n"
        ".type fill_vector, @function\n"
        "fill_vector:\n"
        "  .set off, 0\n"
        "  .rept 250\n"
        "  mov %rsi, off(%rdi)\n"
        "  .set off, off + 8\n"
        "  .endr\n"
        "  movq %rsi, %xmm0\n"
        "  punpcklqdq %xmm0, %xmm0\n"
        "  .set off, 2004\n"
        "  .rept 8\n"
        "  movdqu %xmm0, off(%rdi)\n"
        "  .set off, off + 24\n"
        "  .endr\n"
        "  ret\n"
        ".size fill_vector, . - fill_vector\n");

int main(int argc, char **argv) {
  if (argc < 2 || (strcmp(argv[1], "rep") != 0 && strcmp(argv[1], "vector") != 0)) {
    fprintf(stderr, "usage: full_overlay rep|vector [ROUNDS]\n");
    return 2;
  }
  int rep = strcmp(argv[1], "rep") == 0;
  long rounds = argc > 2 ? atol(argv[2]) : 2000000;
  unsigned long sum = 0;
  for (long r = 0; r < rounds; r++) {
    if (rep) {
      fill_copy(scratch, dst, src, (unsigned long)r);
      src[r % 512] = (char)r;
      sum += (unsigned char)dst[(r * 7) % 512];
    } else {
      fill_vector(scratch, (unsigned long)r);
      sum += ((unsigned char *)scratch)[2004 + (r % 190)];
    }
    sum += scratch[r % 250];
  }
  printf("%lu\n", sum);
  return 0;
}
