/* Half of its time in code that no file maps, as a JIT compiler's output:
 * a countdown loop copied into an anonymous executable page, called in
 * turn with branchy code of the executable itself. A trace sampled in the
 * anonymous page ends before its first entry (outside_mappings).
 * Argument: rounds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* dec rdi; jnz .-3; mov rax, rdi; ret */
static const unsigned char countdown[] = {0x48, 0xff, 0xcf, 0x75, 0xfb, 0x48, 0x89, 0xf8, 0xc3};

__attribute__((noinline)) static unsigned file_work(unsigned x) {
    for (int i = 0; i < 200000; i++)
        x = (x & 1) ? x * 3 + 1 : (x >> 1) ^ 0x2545f491u;
    return x;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 100;
    unsigned char *page = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        return 1;
    memcpy(page, countdown, sizeof countdown);
    if (mprotect(page, 4096, PROT_READ | PROT_EXEC) != 0)
        return 1;
    unsigned long (*jitted)(unsigned long) = (unsigned long (*)(unsigned long))page;
    unsigned x = 1;
    unsigned long left = 0;
    for (int r = 0; r < rounds; r++) {
        left += jitted(1000000);
        x = file_work(x);
    }
    printf("jit %lu %u\n", left, x);
    return 0;
}
