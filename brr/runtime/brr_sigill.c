/* Native execution of branch-on-random: brr is an instruction real CPUs
 * reject (#UD, SIGILL; see brr/README.md), so this handler emulates it, as
 * the paper did to measure accuracy: decode the 8-byte brr at the faulting
 * pc, draw its outcome from a thread-local LFSR that is the same model as
 * brr::lfsr (64-bit Galois LFSR, x^64+x^4+x^3+x+1, AND of the register bits
 * in BRR_MASKS), and resume at the target or after the instruction.
 * Seeded from $BRR_SEED (default 1, as brr-run --seed), so a single-threaded
 * program takes the same brr outcomes natively and under the emulator.
 * Any other illegal instruction gets the default action (the process dies
 * with SIGILL as it would without this handler). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

static const uint64_t brr_masks[16] = { @MASKS@ };
static const uint64_t brr_feedback = @FEEDBACK@;
static const uint64_t brr_default_seed = @DEFAULT_SEED@;

static uint64_t brr_seed = 1;
static __thread uint64_t brr_state;

static void brr_sigill(int sig, siginfo_t *info, void *context)
{
	ucontext_t *uc = context;
	const unsigned char *ip = (const unsigned char *)uc->uc_mcontext.gregs[REG_RIP];
	(void)info;
	if ((ip[0] & ~4) != 0x40 || ip[1] != 0x0f || ip[2] != 0xb9 || (ip[3] & 0xc7) != 0x05) {
		signal(sig, SIG_DFL);
		return;
	}
	unsigned freq = (unsigned)((ip[0] >> 2) & 1) << 3 | (ip[3] >> 3) & 7;
	int32_t rel;
	memcpy(&rel, ip + 4, sizeof rel);
	if (brr_state == 0)
		brr_state = brr_seed ? brr_seed : brr_default_seed;
	uint64_t mask = brr_masks[freq];
	int taken = (brr_state & mask) == mask;
	brr_state = brr_state << 1 ^ (brr_feedback & -(brr_state >> 63));
	uc->uc_mcontext.gregs[REG_RIP] = (greg_t)(ip + 8 + (taken ? rel : 0));
}

__attribute__((constructor(101))) static void brr_install(void)
{
	const char *seed = getenv("BRR_SEED");
	if (seed)
		brr_seed = strtoull(seed, 0, 0);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = brr_sigill;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigaction(SIGILL, &sa, 0);
}
