/* The branch-on-random paper's microbenchmark (Lee and Zilles, CGO 2008):
 * a checksum and character-class counts over about 500K characters of text.
 * The text is generated here from a fixed seed so runs are reproducible.
 * Usage: charclass [REPEATS] [SEED] */
#include <stdio.h>
#include <stdlib.h>

#define TEXT_LEN 500000

static unsigned char text[TEXT_LEN];

static unsigned next_random(unsigned *state)
{
	*state = *state * 1103515245u + 12345u;
	return *state >> 16;
}

/* Words of lower-case letters, some capitalised, some numbers, punctuation,
 * spaces and line breaks, in proportions like English prose. */
static void generate(unsigned seed)
{
	static const char punct[] = ".,;:!?'\"()-";
	unsigned state = seed;
	size_t i = 0;
	while (i < TEXT_LEN) {
		unsigned r = next_random(&state);
		unsigned len = 1 + r % 9;
		int number = r % 23 == 0;
		for (unsigned j = 0; j < len && i < TEXT_LEN; j++) {
			unsigned c = next_random(&state);
			if (number)
				text[i++] = '0' + c % 10;
			else if (j == 0 && c % 7 == 0)
				text[i++] = 'A' + c % 26;
			else
				text[i++] = 'a' + c % 26;
		}
		if (i < TEXT_LEN && r % 5 == 0)
			text[i++] = punct[(r >> 4) % (sizeof punct - 1)];
		if (i < TEXT_LEN)
			text[i++] = r % 11 == 0 ? '\n' : ' ';
	}
}

struct counts {
	unsigned long upper, lower, digit, space, newline, punct, other;
	unsigned checksum;
};

static void scan(struct counts *k)
{
	for (size_t i = 0; i < TEXT_LEN; i++) {
		unsigned c = text[i];
		k->checksum = (k->checksum << 5 | k->checksum >> 27) ^ c;
		if (c >= 'a' && c <= 'z')
			k->lower++;
		else if (c >= 'A' && c <= 'Z')
			k->upper++;
		else if (c >= '0' && c <= '9')
			k->digit++;
		else if (c == ' ')
			k->space++;
		else if (c == '\n')
			k->newline++;
		else if (c < 127 && c > 32)
			k->punct++;
		else
			k->other++;
	}
}

int main(int argc, char **argv)
{
	int repeats = argc > 1 ? atoi(argv[1]) : 1;
	unsigned seed = argc > 2 ? (unsigned)strtoul(argv[2], 0, 10) : 12345u;
	struct counts k = {0};
	generate(seed);
	for (int r = 0; r < repeats; r++)
		scan(&k);
	printf("checksum %08x\n", k.checksum);
	printf("upper %lu lower %lu digit %lu space %lu newline %lu punct %lu other %lu\n",
	       k.upper, k.lower, k.digit, k.space, k.newline, k.punct, k.other);
	return 0;
}
