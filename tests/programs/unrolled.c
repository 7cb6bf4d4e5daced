/* A loop of many instructions and few taken branches, as unrolled code
 * is: `spin` runs about 60 ALU instructions per iteration, keeps a value in
 * a stack slot it stores and reloads each time round, takes one branch per
 * iteration (its back edge) and, every eighth iteration, a jz to a call of
 * `eighth`. Every read inside the loop is of the loop's own stores (or the
 * return-address slot `ret` pops), so a segment's checkpoint can go before
 * the loop's last iterations and prove them (a proven tail): without it,
 * a checkpoint inside the loop waits for one breakpoint hit per iteration.
 *
 * In execution order a trace holds, between two `jz` entries, exactly
 * eight back edges.
 *
 * Usage: unrolled [CALLS [thread]]; prints a checksum. With `thread`, a
 * second thread sleeps through the run: the process is then not quiet
 * (the tracer cannot take its private memory as unchanging), and its
 * segments need the proven tail. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *sleeper(void *arg) {
  (void)arg;
  for (;;)
    pause();
  return NULL;
}

unsigned long spin(unsigned long n, unsigned long seed);
__asm__(".text\n"
        ".globl spin\n"
        ".type spin, @function\n"
        "spin:\n"
        "  push %rbp\n"
        "  mov %rsp, %rbp\n"
        "  sub $16, %rsp\n"
        "  xor %ecx, %ecx\n"
        "  mov %rsi, %rax\n"
        "  mov %rsi, %rdx\n"
        "1:\n"
        "  mov %rax, -8(%rbp)\n"
        ".rept 12\n"
        "  imul $0x61c8864f, %edx, %edx\n"
        "  add %ecx, %edx\n"
        "  mov %edx, %esi\n"
        "  shr $13, %esi\n"
        "  xor %esi, %edx\n"
        ".endr\n"
        "  mov -8(%rbp), %rax\n"
        "  add %rdx, %rax\n"
        "  test $7, %ecx\n"
        "  jz 3f\n"
        "2:\n"
        "  inc %ecx\n"
        "  cmp %rdi, %rcx\n"
        "  jb 1b\n"
        "  leave\n"
        "  ret\n"
        "3:\n"
        "  call eighth\n"
        "  jmp 2b\n"
        ".size spin, .-spin\n"
        ".globl eighth\n"
        ".type eighth, @function\n"
        "eighth:\n"
        "  add $1, %rax\n"
        "  ret\n"
        ".size eighth, .-eighth\n");

int main(int argc, char **argv) {
  long calls = argc > 1 ? atol(argv[1]) : 400;
  if (argc > 2 && strcmp(argv[2], "thread") == 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, sleeper, NULL) != 0)
      return 2;
  }
  unsigned long s = 0;
  for (long i = 0; i < calls; i++)
    s += spin(100000, s + (unsigned long)i);
  printf("%lu\n", s);
  return 0;
}
