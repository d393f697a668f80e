/*
 * What a tracer costs the process it watches, in two extremes:
 *
 *   overhead getppid N [--wait]   N getppid() calls (a syscall doing nothing)
 *   overhead pingpong N [--wait]  N round trips of a byte between two
 *                                 threads over two pipes, both threads
 *                                 pinned to one CPU: each round trip is
 *                                 two context switches
 *   overhead mutex N [--wait]     N passes of a turn between
 *                                 MUTEX_THREADS threads through one mutex
 *                                 and a condition variable each: a futex
 *                                 wait and a wake per pass
 *
 * Prints "calls N elapsed_ns T nivcsw K" (see bench.h): N syscalls, round
 * trips or passes.
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

enum { MUTEX_THREADS = 4 };
static pthread_mutex_t bench_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_cond[MUTEX_THREADS];
static uint64_t turn;
static pthread_barrier_t mutex_go;

struct turn_arg {
    int me;
    uint64_t n;
};

/* Passes the turn on n times: waits on its own condition variable for it,
 * under the mutex, then signals the next thread's. Each pass is a futex
 * wait and a futex wake, and the four threads meet on the mutex. */
static void *mutex_worker(void *arg)
{
    struct turn_arg *a = arg;
    pthread_barrier_wait(&mutex_go);
    for (uint64_t i = 0; i < a->n; i++) {
        pthread_mutex_lock(&bench_mutex);
        while (turn % MUTEX_THREADS != (uint64_t)a->me)
            pthread_cond_wait(&turn_cond[a->me], &bench_mutex);
        turn++;
        pthread_cond_signal(&turn_cond[(a->me + 1) % MUTEX_THREADS]);
        pthread_mutex_unlock(&bench_mutex);
    }
    return NULL;
}

static void mutex_contention(uint64_t n, int wait)
{
    uint64_t each = n / MUTEX_THREADS;
    pthread_t t[MUTEX_THREADS];
    struct turn_arg args[MUTEX_THREADS];
    pthread_barrier_init(&mutex_go, NULL, MUTEX_THREADS + 1);
    for (int i = 0; i < MUTEX_THREADS; i++) {
        pthread_cond_init(&turn_cond[i], NULL);
        args[i] = (struct turn_arg){.me = i, .n = each};
        if (pthread_create(&t[i], NULL, mutex_worker, &args[i]) != 0) {
            perror("pthread_create");
            exit(1);
        }
    }
    bench_wait(wait);
    uint64_t t0 = bench_start();
    pthread_barrier_wait(&mutex_go);
    for (int i = 0; i < MUTEX_THREADS; i++)
        pthread_join(t[i], NULL);
    bench_report(each * MUTEX_THREADS, t0);
}

int main(int argc, char **argv)
{
    int wait = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s getppid|pingpong|mutex N [--wait]\n", argv[0]);
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
    } else if (strcmp(argv[1], "mutex") == 0) {
        mutex_contention(n, wait);
    } else {
        fprintf(stderr, "%s: unknown mode %s\n", argv[0], argv[1]);
        return 2;
    }
    return 0;
}
