/* Runs branchy work until the file named by argv[1] exists, so a test can
 * start and stop sessions over the control socket while it runs. */
#include <stdio.h>
#include <unistd.h>

__attribute__((noinline)) static unsigned control_work(unsigned x) {
    for (int i = 0; i < 20000; i++)
        x = (x & 1) ? x * 3 + 1 : (x >> 1) ^ 0x2545f491u;
    return x;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    unsigned x = 1;
    while (access(argv[1], F_OK) != 0)
        x = control_work(x);
    printf("control done\n");
    return 0;
}
