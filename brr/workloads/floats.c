/* Floating point through the SSE and x87 units and libc's formatting and
 * maths, printed with every digit so that an emulated run can be compared
 * byte for byte with a native one. Deterministic: no time, no addresses. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double unit(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) * 0x1p-53;
}

/* Simpson's rule on exp(-x^2): doubles, divisions, libm. */
__attribute__((noinline)) static double integrate(int n)
{
	double h = 4.0 / n, sum = exp(0.0) + exp(-16.0);
	for (int i = 1; i < n; i++) {
		double x = i * h;
		sum += (i & 1 ? 4.0 : 2.0) * exp(-x * x);
	}
	return sum * h / 3.0;
}

/* Single precision, conversions both ways, comparisons that branch. */
__attribute__((noinline)) static uint64_t singles(int n)
{
	uint64_t h = 0;
	float acc = 1.0f;
	for (int i = 0; i < n; i++) {
		float v = (float)unit() * 200.0f - 100.0f;
		acc = acc * 0.999f + v / (1.0f + fabsf(v));
		if (v < acc)
			h = h * 31 + (uint64_t)(int32_t)v;
		else
			h = h * 37 + (uint64_t)(int64_t)(v * 1000.0f);
		h ^= (uint64_t)lrintf(acc * 1e6f);
	}
	return h;
}

/* long double is the x87 unit's 80-bit format. */
__attribute__((noinline)) static long double harmonic(int n)
{
	long double s = 0.0L;
	for (int i = n; i >= 1; i--)
		s += 1.0L / (long double)i;
	return s;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 10000;
	printf("integral %.17g\n", integrate(n));
	printf("singles %llu\n", (unsigned long long)singles(n));
	long double hn = harmonic(n);
	unsigned char b[10];
	memcpy(b, &hn, sizeof b);
	printf("harmonic %.21Lg", hn);
	for (int i = 9; i >= 0; i--)
		printf("%s%02x", i == 9 ? " " : "", b[i]);
	printf("\n");
	double xs[64];
	for (int i = 0; i < 64; i++)
		xs[i] = sqrt(unit()) * (i & 1 ? -1.0 : 1.0) / (1.0 + i);
	qsort(xs, 64, sizeof xs[0], by_value);
	printf("sorted %a %a %a\n", xs[0], xs[31], xs[63]);
	printf("specials %g %g %g %d\n", 1.0 / 0.0, -1.0 / 0.0, nextafter(1.0, 2.0) - 1.0,
	       isnan(sqrt(-1.0)));
	printf("strtod %.17g %.17g\n", strtod("3.14159265358979323846", NULL),
	       strtod("1e-310", NULL));
	return 0;
}
