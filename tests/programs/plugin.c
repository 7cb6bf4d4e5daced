/* A plugin loaded with dlopen after the session started: its code must be
 * traced like the program's. */
__attribute__((noinline)) unsigned plugin_step(unsigned x) {
    return (x & 1) ? x * 3 + 1 : (x >> 1) ^ 0x2545f491u;
}

unsigned plugin_work(unsigned x, long n) {
    for (long i = 0; i < n; i++) {
        if ((x >> 3) & 1)
            x = plugin_step(x);
        else
            x = x * 1664525u + 1013904223u;
    }
    return x;
}
