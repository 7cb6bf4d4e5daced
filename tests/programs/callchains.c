/* Call chains known by construction, for the call-stack tests
 * (tests/callstack.rs). Every function is called from one place only:
 *
 *   main -> outer_a -> mid_b -> leaf_c
 *   main -> outer_d -> leaf_c
 *   main -> rec(4) -> rec(3) -> ... -> rec(0) -> leaf_c    (5 frames of rec)
 *   main -> via_nofp -> spin_nofp
 *   main -> outer_lib -> lib_mid (libchain.so) -> leaf_c   (with -DWITH_LIB)
 *   a SIGPROF handler every millisecond of CPU: on_prof -> sig_leaf, over
 *   whatever it interrupted                                (with -DWITH_SIGNAL,
 *                                                           without via_nofp)
 *
 * spin_nofp is assembly that keeps no frame pointer and uses rbp as a
 * counter: a stack taken inside it is right only if the unwinder does not
 * trust rbp there. Its loop takes about 24 branches per call, so a
 * 128-branch trace that ends inside it holds the call into it. Its CFI
 * directives let a DWARF unwinder (unwind=dwarf) step over it too.
 *
 * Usage: callchains [ITERATIONS]; prints a checksum. */
#include <stdio.h>
#include <stdlib.h>
#ifdef WITH_SIGNAL
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#endif

unsigned spin_nofp(unsigned long n);
__asm__(".text\n"
        ".globl spin_nofp\n"
        ".type spin_nofp, @function\n"
        "spin_nofp:\n"
        "  .cfi_startproc\n"
        "  push %rbp\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  .cfi_offset %rbp, -16\n"
        "  mov %rdi, %rbp\n"
        "  xor %eax, %eax\n"
        "1:\n"
        "  add %ebp, %eax\n"
        "  test $1, %ebp\n"
        "  jz 2f\n"
        "  xor $0x55, %eax\n"
        "2:\n"
        "  dec %rbp\n"
        "  jnz 1b\n"
        "  pop %rbp\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size spin_nofp, .-spin_nofp\n");

__attribute__((noinline)) unsigned leaf_c(unsigned x, int n) {
  unsigned h = x;
  for (int i = 0; i < n; i++) {
    h = h * 2654435761u + (unsigned)i;
    if (h & 0x100)
      h ^= h >> 7;
    else
      h += 3;
  }
  return h;
}

__attribute__((noinline)) unsigned mid_b(unsigned x) { return leaf_c(x, 400) + 1; }
__attribute__((noinline)) unsigned outer_a(unsigned x) { return mid_b(x) ^ 5; }
__attribute__((noinline)) unsigned outer_d(unsigned x) { return leaf_c(x + 7, 300) - 2; }

__attribute__((noinline)) unsigned rec(unsigned x, int depth) {
  if (depth == 0)
    return leaf_c(x, 200);
  unsigned r = rec(x + 1, depth - 1);
  /* Opaque to the optimiser: the recursion stays a recursion. */
  __asm__ volatile("" : "+r"(r));
  return r + 1;
}

#ifdef WITH_LIB
unsigned lib_mid(unsigned x, unsigned (*leaf)(unsigned, int));
__attribute__((noinline)) unsigned outer_lib(unsigned x) { return lib_mid(x, leaf_c) ^ 9; }
#endif

#ifdef WITH_SIGNAL
static volatile unsigned sig_sink;

__attribute__((noinline)) unsigned sig_leaf(unsigned x) {
  for (int i = 0; i < 200000; i++)
    x = x * 2654435761u + (x >> 13) + (unsigned)i;
  return x;
}

__attribute__((noinline)) void on_prof(int sig) { sig_sink += sig_leaf(sig_sink + (unsigned)sig); }
#endif

__attribute__((noinline)) unsigned via_nofp(unsigned x) {
  unsigned s = 0;
  for (int i = 0; i < 8; i++)
    s += spin_nofp(16 + (x & 1));
  return s;
}

int main(int argc, char **argv) {
  long iterations = argc > 1 ? atol(argv[1]) : 100000;
  unsigned s = 0;
#ifdef WITH_SIGNAL
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_prof;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGPROF, &sa, NULL);
  struct itimerval every_ms = {{0, 1000}, {0, 1000}};
  setitimer(ITIMER_PROF, &every_ms, NULL);
#endif
  for (long i = 0; i < iterations; i++) {
    s += outer_a((unsigned)i);
    s += outer_d((unsigned)i);
    s += rec((unsigned)i, 4);
#ifndef WITH_SIGNAL
    s += via_nofp((unsigned)i);
#endif
#ifdef WITH_LIB
    s += outer_lib((unsigned)i);
#endif
  }
  printf("%u\n", s);
  return 0;
}
