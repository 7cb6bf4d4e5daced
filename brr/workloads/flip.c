/* A branch whose bias flips halfway through the run: for the first half of
 * the iterations `classify` takes its branch about 90% of the time, for the
 * second half about 10%, so over the whole run it is taken about half the
 * time. A profile from the first executions only (ephemeral instrumentation
 * without re-hooking) sees ~90%; re-hooking at every epoch samples the whole
 * run. Usage: flip [ITERATIONS] (default 1000000); prints a checksum. */
#include <stdio.h>
#include <stdlib.h>

static unsigned long state = 12345;
static volatile unsigned long low, high;

static unsigned rnd(void)
{
	state = state * 6364136223846793005UL + 1442695040888963407UL;
	return (unsigned)(state >> 33);
}

__attribute__((noinline)) static long classify(unsigned x, unsigned threshold)
{
	if (x % 100 < threshold) {
		low++;
		return 3 * (long)x + 1;
	}
	high++;
	return (long)(x >> 1);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	if (n < 2) {
		fprintf(stderr, "flip: ITERATIONS must be at least 2\n");
		return 2;
	}
	long sum = 0;
	for (long i = 0; i < n; i++)
		sum += classify(rnd(), i < n / 2 ? 90 : 10);
	printf("%ld\n", sum);
	return 0;
}
