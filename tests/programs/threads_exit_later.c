/* Eight threads that exist before any session starts and end during one:
 * they wait on a pipe that main closes when a line arrives on stdin. Main
 * prints "ready" once the threads exist and "joined" once they ended, then
 * waits for a second line before exiting. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static int pipe_fds[2];

static void *waiter(void *arg) {
    char c;
    (void)arg;
    while (read(pipe_fds[0], &c, 1) > 0) {
    }
    return NULL;
}

__attribute__((noinline)) static unsigned spin(unsigned x) {
    for (long i = 0; i < 20000000; i++)
        x = (x & 1) ? x * 3 + 1 : (x >> 1) ^ 0x77u;
    return x;
}

int main(void) {
    char line[64];
    if (pipe(pipe_fds) != 0)
        return 1;
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        if (pthread_create(&t[i], NULL, waiter, NULL) != 0)
            return 1;
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        return 1;
    close(pipe_fds[1]);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    printf("joined %u\n", spin(3));
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        return 1;
    return 0;
}
