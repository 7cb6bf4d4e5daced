/* Loads whose values are phased: five loads produce value A in the first
 * half of the run and value B in the second (a parameter block rewritten
 * once, halfway), so each has a top-1 invariance of exactly 0.5 although
 * any short window of the run sees one value only. Two more loads always
 * read 1 and 2 (invariance 1). `volatile` makes each a load on every
 * iteration, so each executes exactly ITERATIONS times. Seven loads per
 * iteration, an odd number, so that sampling every 2^k-th load reaches
 * all of them rather than aliasing onto a few.
 * Usage: phased [ITERATIONS] */
#include <stdio.h>
#include <stdlib.h>

struct params {
	long scale, offset, mask, shift;
};

static volatile struct params P = { 3, 17, 0xff, 2 };
static volatile long mode = 0;
static volatile long unit = 1;
static volatile long two = 2;

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	unsigned long sum = 0;
	for (long i = 0; i < n; i++) {
		if (i == n / 2) {
			P.scale = 5;
			P.offset = 29;
			P.mask = 0x7f;
			P.shift = 3;
			mode = 1;
		}
		sum += ((i * P.scale + P.offset) & P.mask) >> P.shift;
		sum ^= mode;
		sum += unit;
		sum -= two;
	}
	printf("%lu\n", sum);
	return 0;
}
