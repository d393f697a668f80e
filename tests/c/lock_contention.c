/*
 * Threads contending on one global mutex with known hold times, for
 * `rip-probe locks`: THREADS threads (argv[1], default 4) each take
 * g_contended, hold it HOLD_MS (argv[2], default 5) ms in hold_lock(),
 * release it and come back at once, forever. Prints `worker <tid>` per
 * thread, `lock <address>`, then `ready`.
 *
 * Built with frame pointers, as a program profiled in production often
 * is: the wakers' stacks are walked through them.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

pthread_mutex_t g_contended = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t out = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t started;
static long hold_ms = 5;

/* Holds the lock hold_ms, then releases it: the wakers' location. */
__attribute__((noinline)) static void hold_lock(void)
{
    pthread_mutex_lock(&g_contended);
    struct timespec ts = {.tv_sec = 0, .tv_nsec = hold_ms * 1000000L};
    nanosleep(&ts, NULL);
    pthread_mutex_unlock(&g_contended);
}

static void *worker(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&out);
    printf("worker %ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    pthread_mutex_unlock(&out);
    pthread_barrier_wait(&started);
    for (;;)
        hold_lock();
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    if (argc > 2)
        hold_ms = atol(argv[2]);
    if (threads < 1 || threads > 64 || hold_ms < 1 || hold_ms > 1000) {
        fprintf(stderr, "usage: %s [THREADS 1-64] [HOLD_MS 1-1000]\n", argv[0]);
        return 2;
    }
    pthread_barrier_init(&started, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, NULL) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    pthread_barrier_wait(&started);
    printf("lock %p\nready\n", (void *)&g_contended);
    fflush(stdout);
    /* Until killed, or until stdin closes (the test's way to end it). */
    char c;
    while (read(0, &c, 1) > 0)
        ;
    return 0;
}
