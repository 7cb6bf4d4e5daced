/* A loop that resonates with counter-based sampling (Lee and Zilles, §6):
 * every iteration executes exactly two instrumented branches, the loop test
 * and a branch whose direction alternates. A global countdown with an even
 * interval therefore always expires at the same site, and, for that site,
 * always on the same direction: its samples miss whole edges. brr samples
 * each execution independently and sees them all.
 * Usage: resonance [ITERATIONS] */
#include <stdio.h>
#include <stdlib.h>

static volatile unsigned long odd, even;

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	for (long i = 0; i < n; i++) {
		if (i & 1)
			odd++;
		else
			even++;
	}
	printf("odd %lu even %lu\n", odd, even);
	return 0;
}
