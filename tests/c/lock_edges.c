/*
 * Locks whose memory no longer says who holds them, for rip-probe's
 * lock-owner tests. Each waiter sleeps in futex(2) on a mutex the main
 * thread locked; then the main thread changes the mutex's memory under it
 * (the kernel does not wake a futex waiter for that):
 *
 *   reused   the mutex lived in a heap block that was freed and reused
 *            for text: its bytes are now a string
 *   zeroed   freed and reused for integers: the lock word is 0 and the
 *            old owner's tid sits where __owner was
 *   corrupt  the __owner field overwritten with garbage
 *
 * Also a PTHREAD_PRIO_PROTECT mutex: prints `pp <errno of its lock>`, and
 * when that is 0 a waiter for it (`wait pp <tid> <addr> <holder>`).
 *
 * Prints `holder <tid>`, `wait <name> <tid> <addr> <owner>` per waiter,
 * then `ready`; exits when stdin closes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pid_t tid(void) { return (pid_t)syscall(SYS_gettid); }

static pid_t holder;

struct waiter {
    const char *name;
    pthread_mutex_t *m;
    pid_t tid; /* set by the waiter before it blocks */
};

static void *wait_for(void *arg)
{
    struct waiter *w = arg;
    printf("wait %s %d %p %d\n", w->name, tid(), (void *)w->m, (int)holder);
    fflush(stdout);
    __atomic_store_n(&w->tid, tid(), __ATOMIC_RELEASE);
    pthread_mutex_lock(w->m);
    return NULL;
}

/* Until thread `t` sleeps in futex(2) (its /proc syscall line says 202). */
static void await_futex(pid_t t)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)t);
    for (int i = 0; i < 1000; i++) {
        FILE *f = fopen(path, "r");
        if (f != NULL) {
            int asleep = fgets(line, sizeof line, f) != NULL && strncmp(line, "202 ", 4) == 0;
            fclose(f);
            if (asleep)
                return;
        }
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "thread %d never slept in futex\n", (int)t);
    exit(1);
}

/* Locks w->m, starts its waiter and returns once the waiter sleeps. */
static void start_waiter(struct waiter *w)
{
    pthread_mutex_lock(w->m);
    pthread_t t;
    if (pthread_create(&t, NULL, wait_for, w) != 0) {
        perror("pthread_create");
        exit(1);
    }
    while (__atomic_load_n(&w->tid, __ATOMIC_ACQUIRE) == 0)
        sched_yield();
    await_futex(w->tid);
}

int main(void)
{
    holder = tid();
    printf("holder %d\n", holder);
    fflush(stdout);

    /* Freed and reused for a string. */
    pthread_mutex_t *reused = malloc(256);
    pthread_mutex_init(reused, NULL);
    struct waiter w1 = {"reused", reused, 0};
    start_waiter(&w1);
    strcpy((char *)reused, "GET /index.html HTTP/1.1 -- a log line now lives here");

    /* Freed and reused for integers: the old owner's tid where __owner was. */
    pthread_mutex_t *zeroed = malloc(256);
    pthread_mutex_init(zeroed, NULL);
    struct waiter w2 = {"zeroed", zeroed, 0};
    start_waiter(&w2);
    int32_t *ints = (int32_t *)zeroed;
    memset(ints, 0, 64);
    ints[2] = holder;
    ints[3] = 1;

    /* The owner field overwritten with garbage. */
    static pthread_mutex_t corrupt = PTHREAD_MUTEX_INITIALIZER;
    struct waiter w3 = {"corrupt", &corrupt, 0};
    start_waiter(&w3);
    ((int32_t *)&corrupt)[2] = (int32_t)0xdeadbeef;

    /* Priority protect. */
    static pthread_mutex_t pp;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_PROTECT);
    pthread_mutexattr_setprioceiling(&a, sched_get_priority_min(SCHED_FIFO));
    pthread_mutex_init(&pp, &a);
    int err = pthread_mutex_lock(&pp);
    printf("pp %d\n", err);
    if (err == 0) {
        pthread_mutex_unlock(&pp);
        struct waiter w4 = {"pp", &pp, 0};
        start_waiter(&w4);
    }
    printf("ready\n");
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    return 0;
}
