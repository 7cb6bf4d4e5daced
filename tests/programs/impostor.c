/* An impostor control socket. Run as another user, it binds argv[1]
 * (making the directory above it, open to everyone, when missing) and
 * answers every connection with the line argv[2], so that a test can check
 * that the library and profiler-ctl refuse it. Prints "listening" once
 * bound; serves until killed. */
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    /* Clients that hang up before the answer must not end the impostor. */
    signal(SIGPIPE, SIG_IGN);
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    if (strlen(argv[1]) >= sizeof dir)
        return 3;
    strcpy(dir, argv[1]);
    char *parent = dirname(dir);
    if (mkdir(parent, 0777) == 0)
        chmod(parent, 0777);
    unlink(argv[1]);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    strcpy(addr.sun_path, argv[1]);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, 16) != 0) {
        perror(argv[1]);
        return 1;
    }
    chmod(argv[1], 0777);
    printf("listening\n");
    fflush(stdout);
    for (;;) {
        int c = accept(fd, NULL, NULL);
        if (c < 0)
            continue;
        char request[4096];
        ssize_t ignored = read(c, request, sizeof request);
        (void)ignored;
        dprintf(c, "%s\n", argv[2]);
        close(c);
    }
}
