/* A program with its own SIGTRAP handler, installed after the library's
 * constructor: raise(), an int3 of its own and a handler installed with
 * signal() must all reach it, sigaction must report back what the program
 * installed, and blocking SIGTRAP around hot branches must not kill it. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

static volatile int traps, old_traps;
static volatile long sink;

static void on_trap(int sig, siginfo_t *info, void *ctx) {
  (void)ctx;
  traps++;
  /* Branches inside the handler: hooked code met inside a SIGTRAP handler. */
  for (int i = 0; i < 100; i++)
    if (i % 7 == 0)
      sink += sig + info->si_code;
}

static void old_style(int sig) { old_traps += sig; }

int main(void) {
  struct sigaction sa, back;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_trap;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGTRAP, &sa, NULL);
  sigaction(SIGTRAP, NULL, &back);
  printf("handler reported back: %d\n", back.sa_sigaction == on_trap);
  for (int i = 0; i < 5; i++)
    raise(SIGTRAP);
  __asm__ volatile("int3");
  printf("traps after raise and int3: %d\n", traps);
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTRAP);
  sigprocmask(SIG_BLOCK, &block, &old);
  long acc = 0;
  for (long i = 0; i < 100000; i++)
    if (i % 5 == 2)
      acc++;
  sigprocmask(SIG_SETMASK, &old, NULL);
  printf("blocked loop: %ld\n", acc);
  void (*prev)(int) = signal(SIGTRAP, old_style);
  printf("signal returned the sigaction handler: %d\n", (void *)prev == (void *)on_trap);
  raise(SIGTRAP);
  printf("old-style handler got %d, handler total %d\n", old_traps, traps);
  return 0;
}
