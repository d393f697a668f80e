/*
 * What a tracer costs the process it watches, in two extremes:
 *
 *   overhead getppid N [--wait]   N getppid() calls (a syscall doing nothing)
 *   overhead pingpong N [--wait]  N round trips of a byte between two
 *                                 threads over two pipes, both threads
 *                                 pinned to one CPU: each round trip is
 *                                 two context switches
 *
 * Prints "calls N elapsed_ns T nivcsw K" (see bench.h): N syscalls or
 * round trips.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bench.h"

static void pin_to_cpu0(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        perror("sched_setaffinity");
        exit(1);
    }
}

static void getppid_loop(uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        syscall(SYS_getppid);
}

struct pong {
    int in, out;
    uint64_t n;
};

static void move_byte(int in, int out)
{
    char c;
    if (read(in, &c, 1) != 1 || write(out, &c, 1) != 1) {
        perror("ping-pong");
        exit(1);
    }
}

static void *ponger(void *arg)
{
    struct pong *p = arg;
    pin_to_cpu0();
    for (uint64_t i = 0; i < p->n; i++)
        move_byte(p->in, p->out);
    return NULL;
}

static void pingpong(uint64_t n, int wait)
{
    int ping[2], pong[2];
    if (pipe(ping) != 0 || pipe(pong) != 0) {
        perror("pipe");
        exit(1);
    }
    pin_to_cpu0();
    struct pong p = {.in = ping[0], .out = pong[1], .n = n};
    pthread_t t;
    if (pthread_create(&t, NULL, ponger, &p) != 0) {
        perror("pthread_create");
        exit(1);
    }
    bench_wait(wait);
    uint64_t t0 = bench_start();
    char c = 'x';
    for (uint64_t i = 0; i < n; i++) {
        if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1) {
            perror("ping-pong");
            exit(1);
        }
    }
    bench_report(n, t0);
    pthread_join(t, NULL);
}

int main(int argc, char **argv)
{
    int wait = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s getppid|pingpong N [--wait]\n", argv[0]);
        return 2;
    }
    uint64_t n = bench_args(argc, argv, 2, &wait);
    if (strcmp(argv[1], "getppid") == 0) {
        bench_wait(wait);
        uint64_t t0 = bench_start();
        getppid_loop(n);
        bench_report(n, t0);
    } else if (strcmp(argv[1], "pingpong") == 0) {
        pingpong(n, wait);
    } else {
        fprintf(stderr, "%s: unknown mode %s\n", argv[0], argv[1]);
        return 2;
    }
    return 0;
}
