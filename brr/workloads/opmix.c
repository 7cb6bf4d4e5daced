/* A mix of integer operations of every width, library calls and control
 * flow, printed so that an emulator's run can be compared byte for byte with
 * a native one. Deterministic: no time, no addresses in the output. */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static uint64_t h = 1469598103934665603ull;
static void mix(uint64_t v)
{
	h = (h ^ v) * 1099511628211ull;
}

__attribute__((noinline)) static void widths(void)
{
	for (int i = 0; i < 20000; i++) {
		uint64_t a = next(), b = next() | 1;
		int8_t a8 = (int8_t)a, b8 = (int8_t)(b | 1);
		int16_t a16 = (int16_t)a, b16 = (int16_t)b;
		int32_t a32 = (int32_t)a, b32 = (int32_t)b;
		int64_t a64 = (int64_t)a, b64 = (int64_t)b;
		unsigned s = (unsigned)(b >> 58);
		mix((uint8_t)(a8 + b8) ^ (uint8_t)(a8 * b8) ^ (uint8_t)(a8 >> 3));
		mix((uint16_t)(a16 - b16) ^ (uint16_t)(a16 * b16) ^ (uint16_t)(a16 >> (s & 15)));
		mix((uint32_t)(a32 / b32) ^ (uint32_t)(a32 % b32) ^ (uint32_t)((uint32_t)a32 / (uint32_t)b32));
		mix((uint64_t)(a64 / b64) ^ (uint64_t)(a64 % b64) ^ a / b ^ a % b);
		mix((uint8_t)a / (uint8_t)(b | 1) + (uint16_t)a % (uint16_t)(b | 1));
		mix(a << s ^ a >> s ^ (uint64_t)(a64 >> s) ^ (a << s | a >> ((64 - s) & 63)));
		mix((uint32_t)a << (s & 31) ^ (uint32_t)a >> (s & 31) ^ (uint32_t)(a32 >> (s & 31)));
		mix((uint64_t)(((unsigned __int128)a * b) >> 64) ^ (uint64_t)(((__int128)a64 * b64) >> 64));
		int32_t r32;
		int64_t r64;
		mix(__builtin_add_overflow(a32, b32, &r32) + 2 * __builtin_mul_overflow(a64, b64, &r64) + r32 + r64);
		mix(__builtin_sub_overflow((int8_t)a8, (int8_t)b8, &a8) + a8);
		mix(__builtin_ctzll(b) + __builtin_clzll(b) * 64 + __builtin_popcountll(a) * 4096);
		mix(__builtin_bswap64(a) ^ __builtin_bswap32((uint32_t)b) ^ __builtin_bswap16((uint16_t)a));
		mix((a32 < b32) + 2 * (a < b) + 4 * (a16 <= b16) + 8 * (a8 > b8) + 16 * (a64 >= b64) + 32 * ((uint8_t)a8 < (uint8_t)b8));
		mix(a32 < 0 ? -a32 : a32);
		mix(~a ^ -b);
	}
}

static int cmp_u32(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
	return (a > b) - (a < b);
}

__attribute__((noinline)) static void library(void)
{
	static uint32_t v[5000];
	for (int i = 0; i < 5000; i++)
		v[i] = (uint32_t)next();
	qsort(v, 5000, sizeof v[0], cmp_u32);
	for (int i = 0; i < 5000; i += 97)
		mix(v[i]);
	char buf[256];
	for (int i = 0; i < 300; i++) {
		uint64_t a = next();
		int n = snprintf(buf, sizeof buf, "%d|%u|%x|%lX|%lld|%-8s|%08.3s|%c|%5.2d|%o|%zu", (int)a, (unsigned)(a >> 7), (unsigned)a,
				 (unsigned long)a, (long long)a, "abc", "truncate", 'A' + (int)(a % 26), (int)(a % 100), (unsigned)(a & 0777),
				 (size_t)i);
		mix(n);
		for (int j = 0; j < n; j++)
			mix((unsigned char)buf[j]);
		mix(strtoul(buf + 1, 0, 10) + strlen(buf) + (strchr(buf, '|') - buf));
		mix(strtol("-12345", 0, 0) + strtoll("0x7fffffffffff", 0, 16));
	}
	char s1[200], s2[200];
	for (int i = 0; i < 1000; i++) {
		int n = (int)(next() % 190);
		for (int j = 0; j < n; j++)
			s1[j] = 'a' + (char)(next() % 3);
		s1[n] = 0;
		memcpy(s2, s1, (size_t)n + 1);
		if (n > 2)
			s2[next() % (unsigned)n] = 'b';
		mix((uint64_t)(strcmp(s1, s2) > 0) + 2 * (uint64_t)(memcmp(s1, s2, (size_t)n) < 0) + strlen(s1));
		memmove(s1 + 1, s1, (size_t)n / 2);
		memset(s1 + n / 2, 'z', (size_t)n / 4);
		for (int j = 0; j < n; j++)
			mix((unsigned char)s1[j]);
	}
	/* malloc: small (brk) and large (mmap) blocks, realloc, free. */
	void *blocks[64] = {0};
	for (int i = 0; i < 2000; i++) {
		unsigned k = (unsigned)(next() % 64);
		size_t size = (next() % 8 == 0) ? 200000 + next() % 100000 : 1 + next() % 3000;
		if (blocks[k] && next() % 2)
			blocks[k] = realloc(blocks[k], size);
		else {
			free(blocks[k]);
			blocks[k] = malloc(size);
		}
		memset(blocks[k], (int)k, size);
		mix(((unsigned char *)blocks[k])[size - 1]);
	}
	for (int i = 0; i < 64; i++)
		free(blocks[i]);
}

/* Loops the compilers vectorise with SSE2. */
__attribute__((noinline)) static void vectors(void)
{
	static uint8_t bytes[4096];
	static int32_t ints[1024], out[1024];
	static int16_t shorts[1024];
	for (int i = 0; i < 4096; i++)
		bytes[i] = (uint8_t)next();
	for (int i = 0; i < 1024; i++) {
		ints[i] = (int32_t)next();
		shorts[i] = (int16_t)next();
	}
	for (int rep = 0; rep < 20; rep++) {
		uint32_t sum = 0;
		uint8_t mx = 0;
		int count = 0;
		for (int i = 0; i < 4096; i++) {
			sum += bytes[i];
			mx = bytes[i] > mx ? bytes[i] : mx;
			count += bytes[i] == (uint8_t)rep;
		}
		for (int i = 0; i < 1024; i++)
			out[i] = ints[i] * 3 + (ints[i] >> 2) - (shorts[i] & 0xff) + (ints[i] > 0 ? 1 : -1);
		int64_t acc = 0;
		for (int i = 0; i < 1024; i++)
			acc += (int64_t)out[i] ^ shorts[i];
		mix(sum + mx * 65536ull + (uint64_t)count * 0x1000000ull + (uint64_t)acc);
		for (int i = 0; i < 4096; i++)
			bytes[i] = (uint8_t)(bytes[i] * 7 + rep);
	}
}

static int fib(int n)
{
	return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

static uint64_t op_add(uint64_t a, uint64_t b) { return a + b; }
static uint64_t op_xor(uint64_t a, uint64_t b) { return a ^ b; }
static uint64_t op_mul(uint64_t a, uint64_t b) { return a * b; }
static jmp_buf jb;

__attribute__((noinline)) static void control(void)
{
	uint64_t (*ops[])(uint64_t, uint64_t) = {op_add, op_xor, op_mul};
	uint64_t x = 1;
	for (int i = 0; i < 30000; i++) {
		uint64_t r = next();
		x = ops[r % 3](x, r);
		switch (r % 11) {
		case 0: x += 17; break;
		case 1: x ^= x >> 3; break;
		case 2: x *= 5; break;
		case 3: x -= r; break;
		case 4: x = ~x; break;
		case 5: x += x << 7; break;
		case 6: x ^= 0x5555; break;
		case 7: x = x >> 1 | x << 63; break;
		case 8: x += 3; break;
		default: x ^= r; break;
		}
	}
	mix(x);
	mix((uint64_t)fib(22));
	volatile int jumped = 0;
	if (setjmp(jb) == 0) {
		jumped = 1;
		longjmp(jb, 42);
	}
	mix((uint64_t)jumped);
}

int main(int argc, char **argv)
{
	widths();
	printf("widths  %016llx\n", (unsigned long long)h);
	library();
	printf("library %016llx\n", (unsigned long long)h);
	vectors();
	printf("vectors %016llx\n", (unsigned long long)h);
	control();
	printf("control %016llx\n", (unsigned long long)h);
	printf("argc %d argv1 %s\n", argc, argc > 1 ? argv[1] : "-");
	return (int)(h & 0x3f);
}
