/* The workload of tests/tests/leaks.rs: after `ready`, each line `go` on
 * stdin runs one round — leak_fds() keeps 5 descriptors of a file and an
 * eventfd, balanced_fds() opens and closes a thousand more (files, pipes,
 * eventfds); leak_map() keeps 3 anonymous mappings of 64 KiB,
 * balanced_map() maps and unmaps a hundred — and prints `done`. The test
 * traces the rounds it asks for, and knows what each left behind. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#define LEAK_FILES 5
#define LEAK_MAPS 3
#define MAP_BYTES (64 * 1024)

static const char *path;

__attribute__((noinline)) void leak_fds(void) {
    for (int i = 0; i < LEAK_FILES; i++)
        if (open(path, O_RDONLY) < 0) /* LEAK: open */
            perror("open");
    if (eventfd(0, 0) < 0)
        perror("eventfd");
}

__attribute__((noinline)) void balanced_fds(void) {
    for (int i = 0; i < 1000; i++) {
        int fd = open(path, O_RDONLY);
        if (fd >= 0)
            close(fd);
    }
    for (int i = 0; i < 100; i++) {
        int p[2];
        if (pipe(p) == 0) {
            close(p[0]);
            close(p[1]);
        }
        int e = eventfd(0, 0);
        if (e >= 0)
            close(e);
    }
}

__attribute__((noinline)) void leak_map(void) {
    for (int i = 0; i < LEAK_MAPS; i++) {
        void *m = mmap(NULL, MAP_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            perror("mmap");
        else
            memset(m, 1, 4096);
    }
}

__attribute__((noinline)) void balanced_map(void) {
    for (int i = 0; i < 100; i++) {
        void *m = mmap(NULL, MAP_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) {
            memset(m, 1, 4096);
            munmap(m, MAP_BYTES);
        }
    }
}

int main(int argc, char **argv) {
    (void)argc;
    path = argv[0];
    char line[64];
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "go", 2) != 0)
            continue;
        leak_fds();
        balanced_fds();
        leak_map();
        balanced_map();
        printf("done\n");
        fflush(stdout);
    }
    return 0;
}
