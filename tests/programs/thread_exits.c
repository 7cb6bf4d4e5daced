/* Waves of short threads ending each way a thread can end: by returning,
 * by pthread_exit and by pthread_cancel, 1200 in all (more than the
 * tracer's thread table holds at once), then four threads that work. The
 * open descriptors are counted before and after the waves, under a file
 * limit only a little above what the program needs: a tracer that leaked a
 * thread's descriptors would make the program's own open fail.
 * Argument: iterations of the final threads' work. */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#define PER_KIND 400
#define BATCH 8

static long final_iterations = 3000000;

static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

__attribute__((noinline)) static unsigned short_work(unsigned x) {
    for (int i = 0; i < 2000; i++)
        x = (x & 1) ? x * 3 + 1 : (x >> 1) ^ 0x1234567u;
    return x;
}

static void *ends_by_return(void *arg) {
    *(unsigned *)arg = short_work(*(unsigned *)arg);
    return arg;
}

static void *ends_by_exit(void *arg) {
    *(unsigned *)arg = short_work(*(unsigned *)arg);
    pthread_exit(arg);
}

static void *ends_by_cancel(void *arg) {
    *(unsigned *)arg = short_work(*(unsigned *)arg);
    for (;;)
        pause(); /* a cancellation point */
}

__attribute__((noinline)) static unsigned final_work(unsigned x) {
    for (long i = 0; i < final_iterations; i++)
        x = (x & 2) ? x * 5 + 1 : (x >> 1) + 0x3039u;
    return x;
}

static void *final_thread(void *arg) {
    *(unsigned *)arg = final_work(*(unsigned *)arg);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1)
        final_iterations = atol(argv[1]);
    int before = open_fds();
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0)
        return 1;
    lim.rlim_cur = (rlim_t)before + 40;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0)
        return 1;
    void *(*const kinds[3])(void *) = {ends_by_return, ends_by_exit, ends_by_cancel};
    unsigned values[BATCH], check = 0;
    int created = 0;
    for (int k = 0; k < 3; k++) {
        for (int wave = 0; wave < PER_KIND / BATCH; wave++) {
            pthread_t t[BATCH];
            for (int i = 0; i < BATCH; i++) {
                values[i] = (unsigned)(created + i);
                if (pthread_create(&t[i], NULL, kinds[k], &values[i]) != 0)
                    return 2;
            }
            for (int i = 0; i < BATCH; i++) {
                if (k == 2) {
                    /* Let it finish its work before cancelling it. */
                    while (__atomic_load_n(&values[i], __ATOMIC_SEQ_CST) == (unsigned)(created + i))
                        sched_yield();
                    pthread_cancel(t[i]);
                }
                void *ret;
                if (pthread_join(t[i], &ret) != 0)
                    return 3;
                if (k < 2 && ret != &values[i])
                    return 4;
                if (k == 2 && ret != PTHREAD_CANCELED)
                    return 5;
                check ^= values[i];
            }
            created += BATCH;
        }
    }
    int after = open_fds();
    int opened = 0, fds[16];
    for (int i = 0; i < 16; i++) {
        fds[i] = open("/dev/null", O_RDONLY);
        if (fds[i] >= 0)
            opened++;
    }
    for (int i = 0; i < 16; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    pthread_t finals[4];
    unsigned results[4];
    for (int i = 0; i < 4; i++) {
        results[i] = (unsigned)i + 1;
        if (pthread_create(&finals[i], NULL, final_thread, &results[i]) != 0)
            return 6;
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(finals[i], NULL);
        check ^= results[i];
    }
    printf("thread-exits threads=%d fds-leaked=%d opened=%d/16 check=%u\n", created + 4,
           after - before, opened, check);
    return 0;
}
