/* The kind of code the harness workloads (SQLite, Lua, bzip2, zstd) are
 * made of, written so that compilers vectorise it: string scans, byte and
 * word arithmetic over arrays, copies, reductions, hashing, a switch-heavy
 * interpreter, and some floating point. tests/isa_levels.rs compiles it at
 * each x86-64 ISA level and checks every instruction form in its .text.
 * Nothing here is run. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

size_t count_byte(const unsigned char *s, size_t n, unsigned char c) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == c;
    return k;
}

void to_lower(char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] >= 'A' && s[i] <= 'Z')
            s[i] += 'a' - 'A';
}

int compare_nocase(const unsigned char *a, const unsigned char *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int x = a[i] | 0x20, y = b[i] | 0x20;
        if (x != y)
            return x - y;
    }
    return 0;
}

size_t span_digits(const char *s) {
    size_t i = 0;
    while (s[i] >= '0' && s[i] <= '9')
        i++;
    return i;
}

int64_t sum_i32(const int32_t *a, size_t n) {
    int64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i];
    return s;
}

uint32_t sum_u8(const uint8_t *a, size_t n) {
    uint32_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i];
    return s;
}

int16_t max_i16(const int16_t *a, size_t n) {
    int16_t m = INT16_MIN;
    for (size_t i = 0; i < n; i++)
        m = a[i] > m ? a[i] : m;
    return m;
}

uint32_t min_u32(const uint32_t *a, size_t n) {
    uint32_t m = UINT32_MAX;
    for (size_t i = 0; i < n; i++)
        m = a[i] < m ? a[i] : m;
    return m;
}

void add_i32(int32_t *restrict d, const int32_t *a, const int32_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] = a[i] + b[i] * 3;
}

void mul_i64(int64_t *restrict d, const int64_t *a, size_t n, int64_t k) {
    for (size_t i = 0; i < n; i++)
        d[i] = a[i] * k + (a[i] >> 3);
}

void widen_u8(uint32_t *restrict d, const uint8_t *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] = a[i];
}

void narrow_i32(int16_t *restrict d, const int32_t *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] = (int16_t)a[i];
}

void copy_bytes(unsigned char *restrict d, const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] = s[i];
}

void fill_u32(uint32_t *d, size_t n, uint32_t v) {
    for (size_t i = 0; i < n; i++)
        d[i] = v;
}

void reverse_u32(uint32_t *restrict d, const uint32_t *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] = s[n - 1 - i];
}

void select_i32(int32_t *restrict d, const int32_t *a, const int32_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] = a[i] > b[i] ? a[i] - b[i] : b[i] << 2;
}

void shift_u16(uint16_t *restrict d, const uint16_t *a, size_t n, int s) {
    for (size_t i = 0; i < n; i++)
        d[i] = (uint16_t)((a[i] >> s) ^ (a[i] << 1));
}

uint32_t hash_fnv(const unsigned char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 16777619u;
    return h;
}

uint64_t hash_words(const uint64_t *w, size_t n) {
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t x = w[i] * 0x9e3779b97f4a7c15ull;
        h ^= (x >> 29) | (x << 35);
        h = __builtin_bswap64(h) + (uint64_t)__builtin_popcountll(x);
    }
    return h;
}

uint32_t crc_table[256];

uint32_t crc32(const unsigned char *s, size_t n) {
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ s[i]) & 0xff] ^ (c >> 8);
    return ~c;
}

void histogram(uint32_t *h, const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        h[s[i]]++;
}

double dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

void saxpy(float *restrict y, const float *x, float a, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = a * x[i] + y[i];
}

void scale_to_int(int32_t *restrict d, const double *a, double k, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] = (int32_t)(a[i] * k);
}

void int_to_float(float *restrict d, const int32_t *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] = (float)a[i] * 0.5f;
}

double clamp_avg(const double *a, size_t n, double lo, double hi) {
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double v = a[i] < lo ? lo : a[i] > hi ? hi : a[i];
        s += v;
    }
    return n ? s / (double)n : 0;
}

struct record {
    int64_t key;
    int32_t len;
    uint16_t flags;
    uint8_t kind;
    char name[21];
};

void copy_records(struct record *restrict d, const struct record *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        d[i] = s[i];
        d[i].flags |= 1;
    }
}

void clear_record(struct record *r) {
    memset(r, 0, sizeof *r);
}

int64_t varint(const unsigned char *p, int *len) {
    uint64_t v = 0;
    int i = 0;
    do {
        v = (v << 7) | (p[i] & 0x7f);
    } while (p[i++] & 0x80 && i < 9);
    *len = i;
    return (int64_t)v;
}

enum op { PUSH, ADD, SUB, MUL, DIV, NEG, DUP, SWAP, JZ, JMP, LT, EQ, LOAD, STORE, HALT };

int64_t interpret(const int32_t *code, int64_t *mem) {
    int64_t stack[64];
    int sp = 0, pc = 0;
    for (;;) {
        int32_t insn = code[pc++];
        int32_t arg = insn >> 8;
        switch ((enum op)(insn & 0xff)) {
        case PUSH: stack[sp++] = arg; break;
        case ADD: sp--; stack[sp - 1] += stack[sp]; break;
        case SUB: sp--; stack[sp - 1] -= stack[sp]; break;
        case MUL: sp--; stack[sp - 1] *= stack[sp]; break;
        case DIV: sp--; stack[sp - 1] = stack[sp] ? stack[sp - 1] / stack[sp] : 0; break;
        case NEG: stack[sp - 1] = -stack[sp - 1]; break;
        case DUP: stack[sp] = stack[sp - 1]; sp++; break;
        case SWAP: { int64_t t = stack[sp - 1]; stack[sp - 1] = stack[sp - 2]; stack[sp - 2] = t; break; }
        case JZ: if (stack[--sp] == 0) pc = arg; break;
        case JMP: pc = arg; break;
        case LT: sp--; stack[sp - 1] = stack[sp - 1] < stack[sp]; break;
        case EQ: sp--; stack[sp - 1] = stack[sp - 1] == stack[sp]; break;
        case LOAD: stack[sp++] = mem[arg & 63]; break;
        case STORE: mem[arg & 63] = stack[--sp]; break;
        case HALT: return sp ? stack[sp - 1] : 0;
        }
    }
}

int compare_keys(const void *a, const void *b) {
    const struct record *x = a, *y = b;
    return (x->key > y->key) - (x->key < y->key);
}

unsigned leading(uint64_t x) { return x ? (unsigned)__builtin_clzll(x) : 64; }
unsigned trailing(uint32_t x) { return x ? (unsigned)__builtin_ctz(x) : 32; }
uint64_t mulhi(uint64_t a, uint64_t b) { return (uint64_t)(((unsigned __int128)a * b) >> 64); }

/* More idioms: saturating and averaging pixel arithmetic, 16-bit dot
 * products, absolute values, byte-swapped loads, unsigned conversions,
 * bit counting, and 64-bit division. */
void add_saturate(uint8_t *restrict d, const uint8_t *a, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned s = a[i] + b[i];
        d[i] = s > 255 ? 255 : (uint8_t)s;
    }
}

void average_u8(uint8_t *restrict d, const uint8_t *a, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] = (uint8_t)((a[i] + b[i] + 1) >> 1);
}

int32_t dot_i16(const int16_t *a, const int16_t *b, size_t n) {
    int32_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

void abs_i32(int32_t *restrict d, const int32_t *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] = a[i] < 0 ? -a[i] : a[i];
}

void mulhi_i16(int16_t *restrict d, const int16_t *a, const int16_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] = (int16_t)((a[i] * b[i]) >> 16);
}

int8_t min_i8(const int8_t *a, size_t n) {
    int8_t m = INT8_MAX;
    for (size_t i = 0; i < n; i++)
        m = a[i] < m ? a[i] : m;
    return m;
}

uint64_t load_be64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

double u64_to_double(uint64_t v) { return (double)v; }
uint64_t double_to_u64(double v) { return (uint64_t)v; }
float u32_to_float(uint32_t v) { return (float)v; }

void convert_u32(float *restrict d, const uint32_t *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] = (float)a[i];
}

void floats_to_doubles(double *restrict d, const float *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] = a[i] * 2.0;
}

unsigned count_bits(const uint64_t *w, size_t n) {
    unsigned c = 0;
    for (size_t i = 0; i < n; i++)
        c += (unsigned)__builtin_popcountll(w[i]);
    return c;
}

uint64_t divide(uint64_t a, uint64_t b, int64_t c, int64_t d) {
    return a / b + (uint64_t)(c % d);
}

int64_t sum_i8_to_i64(const int8_t *a, size_t n) {
    int64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i];
    return s;
}

void gather_u32(uint32_t *restrict d, const uint32_t *table, const uint32_t *idx, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] = table[idx[i] & 1023];
}

void select_bytes(uint8_t *restrict d, const uint8_t *a, uint8_t lo, uint8_t hi, size_t n) {
    for (size_t i = 0; i < n; i++)
        d[i] = a[i] >= lo && a[i] <= hi ? a[i] : 0;
}

double sqrt_sum(const double *a, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += __builtin_sqrt(a[i]);
    return s;
}
