/* An int3 with no handler: the default action (core, killed by SIGTRAP)
 * must happen with the library as without it. */
#include <stdio.h>

int main(void) {
  printf("before the trap\n");
  fflush(stdout);
  __asm__ volatile("int3");
  printf("not reached\n");
  return 0;
}
