/* The shared library of callchains.c's library chain (built with
 * -DWITH_LIB): main -> outer_lib -> lib_mid (here) -> leaf_c, called back
 * through a pointer. */
unsigned lib_mid(unsigned x, unsigned (*leaf)(unsigned, int)) { return leaf(x, 150) + 3; }
