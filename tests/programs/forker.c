/* fork without exec: the child keeps running (under the inherited tracer
 * state), does work, and exits normally through exit(). Argument: work. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

__attribute__((noinline)) static unsigned work(long n, unsigned x) {
    for (long i = 0; i < n; i++)
        x = (x & 2) ? x * 5 + 1 : (x >> 1) + 0x3039u;
    return x;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 20000000;
    unsigned before = work(n, 1);
    fflush(stdout);
    pid_t child = fork();
    if (child < 0)
        return 1;
    if (child == 0) {
        printf("child %u\n", work(n, before));
        exit(0);
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child)
        return 1;
    printf("parent %u child-exit=%d signaled=%d\n", work(n, 2), WIFEXITED(status) ? WEXITSTATUS(status) : -1,
           WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return 0;
}
