/* A program that reads an unmapped address on purpose, many times, and
 * recovers in its own SIGSEGV handler: the emulator reaching such a load
 * must end its segment there, and the program's own handler must still see
 * every fault (same count, same output as a native run).
 *
 * Each round walks a small linked list whose last node points into a page
 * that was unmapped; the read through it faults, and the handler jumps back
 * with siglongjmp. Argument: rounds. */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

struct node {
    struct node *next;
    long value;
};

static sigjmp_buf recover;
static volatile long faults;

static void on_segv(int sig, siginfo_t *info, void *ctx) {
    (void)sig;
    (void)info;
    (void)ctx;
    faults++;
    siglongjmp(recover, 1);
}

__attribute__((noinline)) static long walk(struct node *n) {
    long sum = 0;
    while (n) {
        sum += n->value;
        if (sum & 1)
            sum = sum * 3 + 1;
        n = n->next;
    }
    return sum;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 100000;
    long page = sysconf(_SC_PAGESIZE);
    char *hole = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (hole == MAP_FAILED || munmap(hole, page) != 0) {
        perror("mmap");
        return 1;
    }
    struct node nodes[8];
    for (int i = 0; i < 8; i++) {
        nodes[i].next = i < 7 ? &nodes[i + 1] : (struct node *)(hole + 64);
        nodes[i].value = i * 7 + 3;
    }
    struct sigaction sa = {0};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
    long total = 0;
    for (long r = 0; r < rounds; r++) {
        if (sigsetjmp(recover, 1) == 0)
            total += walk(&nodes[r & 3]);
        else
            total += 1;
    }
    printf("rounds %ld faults %ld total %ld\n", rounds, faults, total);
    return 0;
}
