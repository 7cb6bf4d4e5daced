/* fork without exec from a process with threads: the child counts its
 * threads and open descriptors and enters a new user namespace, which the
 * kernel allows only to a single-threaded process. Prints what the child
 * found; a library that started anything in the child changes the line. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static pthread_mutex_t hold = PTHREAD_MUTEX_INITIALIZER;

static void *waiter(void *arg) {
    (void)arg;
    pthread_mutex_lock(&hold);
    pthread_mutex_unlock(&hold);
    return NULL;
}

__attribute__((noinline)) static unsigned work(long n, unsigned x) {
    for (long i = 0; i < n; i++)
        x = (x & 2) ? x * 5 + 1 : (x >> 1) + 0x3039u;
    return x;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 20000000;
    pthread_mutex_lock(&hold);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, waiter, NULL) != 0)
            return 1;
    unsigned x = work(n, 1);
    fflush(stdout);
    pid_t child = fork();
    if (child < 0)
        return 1;
    if (child == 0) {
        int threads = entries("/proc/self/task");
        int fds = entries("/proc/self/fd") - 1; /* the directory's own */
        const char *unshared = unshare(CLONE_NEWUSER) == 0 ? "ok" : strerror(errno);
        printf("child threads=%d fds=%d unshare=%s work=%u\n", threads, fds, unshared, work(n, x));
        exit(0);
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child)
        return 1;
    pthread_mutex_unlock(&hold);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("parent child-exit=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}
