/* Runtime of the ephemeral instrumentation (brr-instrument --variant
 * ephemeral), after Traub, Schechter and Smith.
 *
 * Every instrumented unit puts one 48-byte record per conditional-branch
 * site in the `brr_eph` section:
 *     site, stub, remaining, orig, hooked, spare
 * The site holds the branch in its 6-byte rel32 form. Hooking overwrites its
 * first five bytes with `jmp stub` (E9 rel32); the stub counts the edge and,
 * when `remaining` reaches zero, writes `orig` back (unhooking, done in the
 * stub itself). A timer signal re-hooks every unhooked site at each epoch.
 *
 * Environment:
 *   BRR_EPH_P         executions per site before it unhooks (default 1000)
 *   BRR_EPH_EPOCH_US  the epoch: ITIMER_VIRTUAL period in microseconds
 *                     (default 10000, the paper's 10 ms; brr-run's --epoch
 *                     replaces the period by a number of instructions)
 *   BRR_EPH_REHOOK=0  no timer: each site records its first P executions only
 *   BRR_EPH_STATS     file to write "sites S hooks H unhooks U ticks T" to
 * Edge counts are written by edge_rt.c like every other variant's. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>

struct eph_site {
	unsigned char *site;
	unsigned char *stub;
	long remaining;
	unsigned long orig;
	long hooked;
	long spare;
};

extern struct eph_site __start_brr_eph[] __attribute__((weak));
extern struct eph_site __stop_brr_eph[] __attribute__((weak));

/* Incremented by the stubs' unhook code. */
unsigned long __brr_eph_unhooks;
static unsigned long hooks, ticks;
static long persist = 1000;

static void hook_all(void)
{
	for (struct eph_site *s = __start_brr_eph; s < __stop_brr_eph; s++) {
		if (s->hooked)
			continue;
		/* One 8-byte read-modify-write: jmp rel32 in the first five bytes,
		 * the following three as they are. */
		unsigned long word;
		memcpy(&word, s->site, 8);
		long rel = (long)(s->stub - (s->site + 5));
		word = (word & ~0xffffffffffUL) | 0xe9UL | ((unsigned long)(unsigned)rel << 8);
		s->remaining = persist;
		s->hooked = 1;
		memcpy(s->site, &word, 8);
		hooks++;
	}
}

static void on_tick(int sig)
{
	(void)sig;
	ticks++;
	hook_all();
}

__attribute__((constructor)) static void eph_start(void)
{
	const char *p = getenv("BRR_EPH_P");
	if (p) {
		persist = strtol(p, 0, 10);
		if (persist < 1) {
			fprintf(stderr, "brr ephemeral runtime: BRR_EPH_P must be a positive number, got '%s'\n", p);
			exit(2);
		}
	}
	if (__start_brr_eph == __stop_brr_eph)
		return;
	unsigned long lo = -1UL, hi = 0;
	for (struct eph_site *s = __start_brr_eph; s < __stop_brr_eph; s++) {
		unsigned long a = (unsigned long)s->site;
		if (a < lo)
			lo = a;
		if (a + 8 > hi)
			hi = a + 8;
		memcpy(&s->orig, s->site, 8);
	}
	lo &= ~4095UL;
	hi = (hi + 4095) & ~4095UL;
	if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC)) {
		perror("brr ephemeral runtime: mprotect of the code");
		exit(2);
	}
	hook_all();
	const char *r = getenv("BRR_EPH_REHOOK");
	if (r && !strcmp(r, "0"))
		return;
	const char *e = getenv("BRR_EPH_EPOCH_US");
	long us = e ? strtol(e, 0, 10) : 10000;
	if (us < 1) {
		fprintf(stderr, "brr ephemeral runtime: BRR_EPH_EPOCH_US must be positive, got '%s'\n", e);
		exit(2);
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_tick;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGVTALRM, &sa, 0);
	struct itimerval it = {{us / 1000000, us % 1000000}, {us / 1000000, us % 1000000}};
	setitimer(ITIMER_VIRTUAL, &it, 0);
}

__attribute__((destructor)) static void eph_stats(void)
{
	/* No epoch after this point: the counts written are final. */
	struct itimerval off;
	memset(&off, 0, sizeof off);
	setitimer(ITIMER_VIRTUAL, &off, 0);
	const char *path = getenv("BRR_EPH_STATS");
	if (!path)
		return;
	FILE *f = fopen(path, "w");
	if (!f)
		return;
	fprintf(f, "sites %ld hooks %lu unhooks %lu ticks %lu\n",
		(long)(__stop_brr_eph - __start_brr_eph), hooks, __brr_eph_unhooks, ticks);
	fclose(f);
}
