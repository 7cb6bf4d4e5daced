/* An interpreter-style workload: a bytecode loop whose operations are
 * glibc's string and memory functions, so that a trace passes through
 * whichever ifunc variants glibc selected (sse2 … evex) between the
 * dispatcher's indirect jumps. No system call in the loop: every
 * instruction a trace meets is the program's or glibc's string code.
 *
 * Argument: rounds. Prints a deterministic checksum.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

enum op { FIND, LEN, CMP, COPY, SCAN, SPAN, WIDE, HASH, SET, MOVE, NOPS };

#define TEXT 512

static char text[TEXT + 64];
static char other[TEXT + 64];
static wchar_t wide[TEXT / 4 + 8];

__attribute__((noinline)) static unsigned run(const unsigned char *code, size_t n, unsigned seed) {
    unsigned acc = seed;
    for (size_t pc = 0; pc < n; pc++) {
        unsigned arg = code[pc] >> 4;
        size_t at = (acc + arg * 37u) % (TEXT / 2);
        switch ((enum op)(code[pc] & 15)) {
        case FIND: {
            const char *p = memchr(text + at, 'a' + (int)(acc % 26), TEXT - at);
            acc += p ? (unsigned)(p - text) : 3u;
            break;
        }
        case LEN:
            acc += (unsigned)strlen(text + at);
            break;
        case CMP:
            acc += (unsigned)(strcmp(text + at, other + at) > 0) + (unsigned)(memcmp(text, other, at + 1) < 0);
            break;
        case COPY:
            strcpy(other + at, text + TEXT - 64);
            acc += (unsigned)other[at + 1];
            break;
        case SCAN: {
            const char *p = strrchr(text + at, 'a' + (int)(arg % 26));
            acc += p ? (unsigned)(p - text) : 5u;
            acc += strchr(text + at, '!') != NULL;
            break;
        }
        case SPAN:
            acc += (unsigned)strspn(text + at, "abcdefghijklm") + (unsigned)strcspn(text + at, "xyz");
            break;
        case WIDE: {
            size_t w = at / 4;
            acc += (unsigned)wcslen(wide + w) + (wmemchr(wide + w, L'a' + (wchar_t)(acc % 26), TEXT / 4 - w) != NULL);
            break;
        }
        case HASH:
            for (size_t i = at; i < at + 32; i++)
                acc = (text[i] & 1) ? acc * 31 + (unsigned char)text[i] : acc ^ (acc >> 3);
            break;
        case SET:
            memset(other + at, 'a' + (int)(acc % 26), 48);
            acc += (unsigned)other[at + 47];
            break;
        case MOVE:
            memmove(other + at + 1, other + at, 96);
            acc += (unsigned)other[at + 96];
            break;
        default:
            acc = acc * 3 + 1;
        }
    }
    return acc;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 1000;
    unsigned x = 12345;
    for (int i = 0; i < TEXT; i++) {
        x = x * 1664525u + 1013904223u;
        text[i] = (char)('a' + (x >> 24) % 26);
        other[i] = (char)('a' + (x >> 16) % 26);
    }
    text[TEXT] = other[TEXT] = 0;
    for (int i = 0; i < TEXT / 4; i++)
        wide[i] = (wchar_t)text[i * 4];
    wide[TEXT / 4] = 0;
    unsigned char code[256];
    for (int i = 0; i < 256; i++) {
        x = x * 1664525u + 1013904223u;
        code[i] = (unsigned char)(((x >> 20) % NOPS) | ((x >> 8) & 0xf0));
    }
    unsigned acc = 0;
    for (long r = 0; r < rounds; r++) {
        acc = run(code, sizeof code, acc);
        /* Keep the text a string of letters as COPY and MOVE change it. */
        other[TEXT] = 0;
    }
    printf("interp: %u\n", acc);
    return 0;
}
