/* The shared library of the PIE test: lib_hot is the hottest function of
 * the whole program by construction. */
__attribute__((noinline)) unsigned lib_hot(unsigned x) {
    unsigned acc = 0;
    for (int i = 0; i < 40; i++) {
        if ((x >> (i & 15)) & 1)
            acc += x ^ (unsigned)i;
        else
            acc -= x >> 2;
        x = x * 1103515245u + 12345u;
    }
    return acc;
}

__attribute__((noinline)) unsigned lib_light(unsigned x) {
    return x % 5 == 0 ? x / 5 : x * 3;
}
