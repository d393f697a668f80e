/*
 * Condition-variable waiters beside a contended mutex, for rip-probe's
 * lock views: IDLE threads (argv[1], default 200) wait on one condition
 * variable, g_idle, that is never signalled; TIMED threads (argv[2],
 * default 4) wait on g_timed with a TIMEOUT_MS timeout (argv[3], default
 * 20) in a loop, as pool threads polling for work do; HOT threads
 * (argv[4], default 0) pass g_hot, each holding it 2 ms. With OWN
 * (argv[5]) 1, each idle thread waits on a condition variable of its own
 * instead (as a JVM's threads park, each on its own), none signalled. Prints
 * `idle <tid>`, `timed <tid>`, `hot <tid>` per thread, the addresses as
 * `cond <address>` and `mutex <address>`, then `ready` once every idle
 * waiter is inside pthread_cond_wait (it has registered as a waiter: the
 * condition variable's mutex is released only then). Exits when stdin
 * closes.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

pthread_cond_t g_idle = PTHREAD_COND_INITIALIZER;
pthread_mutex_t g_idle_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_timed = PTHREAD_COND_INITIALIZER;
pthread_mutex_t g_timed_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_hot = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t out = PTHREAD_MUTEX_INITIALIZER;
static long timeout_ms = 20;
static int waiting;
static int said;
static int own;

static void say(const char *role)
{
    pthread_mutex_lock(&out);
    printf("%s %ld\n", role, (long)syscall(SYS_gettid));
    fflush(stdout);
    said++;
    pthread_mutex_unlock(&out);
}

static void *idle(void *arg)
{
    (void)arg;
    say("idle");
    pthread_cond_t *cond = &g_idle;
    pthread_mutex_t *lock = &g_idle_lock;
    if (own) {
        cond = malloc(sizeof *cond);
        lock = malloc(sizeof *lock);
        pthread_cond_init(cond, NULL);
        pthread_mutex_init(lock, NULL);
    }
    pthread_mutex_lock(lock);
    /* Counted under g_idle_lock, which (shared) is released only once the
     * waiter is registered; with its own, the count is a moment early. */
    if (own)
        pthread_mutex_lock(&g_idle_lock);
    waiting++;
    if (own)
        pthread_mutex_unlock(&g_idle_lock);
    for (;;)
        pthread_cond_wait(cond, lock);
    return NULL;
}

static void *timed(void *arg)
{
    (void)arg;
    say("timed");
    pthread_mutex_lock(&g_timed_lock);
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += timeout_ms * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&g_timed, &g_timed_lock, &ts);
    }
    return NULL;
}

__attribute__((noinline)) static void hold_hot(void)
{
    pthread_mutex_lock(&g_hot);
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 2000000L};
    nanosleep(&ts, NULL);
    pthread_mutex_unlock(&g_hot);
}

static void *hot(void *arg)
{
    (void)arg;
    say("hot");
    for (;;)
        hold_hot();
    return NULL;
}

static void start(void *(*fn)(void *), int n)
{
    for (int i = 0; i < n; i++) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 64 * 1024);
        if (pthread_create(&t, &a, fn, NULL) != 0) {
            perror("pthread_create");
            exit(1);
        }
    }
}

int main(int argc, char **argv)
{
    int idles = argc > 1 ? atoi(argv[1]) : 200;
    int timeds = argc > 2 ? atoi(argv[2]) : 4;
    if (argc > 3)
        timeout_ms = atol(argv[3]);
    int hots = argc > 4 ? atoi(argv[4]) : 0;
    own = argc > 5 && atoi(argv[5]) == 1;
    if (idles < 0 || idles > 4096 || timeds < 0 || timeds > 64 || timeout_ms < 1 ||
        hots < 0 || hots > 64) {
        fprintf(stderr, "usage: %s [IDLE] [TIMED] [TIMEOUT_MS] [HOT]\n", argv[0]);
        return 2;
    }
    start(idle, idles);
    start(timed, timeds);
    start(hot, hots);
    /* Each idle waiter counted itself under the mutex, which it releases
     * only once registered with the condition variable; every thread has
     * printed its line (none may print after `ready`, when the reader may
     * have gone). */
    for (;;) {
        pthread_mutex_lock(&g_idle_lock);
        int n = waiting;
        pthread_mutex_unlock(&g_idle_lock);
        pthread_mutex_lock(&out);
        int m = said;
        pthread_mutex_unlock(&out);
        if (n == idles && m == idles + timeds + hots)
            break;
        sched_yield();
    }
    printf("cond %p\nmutex %p\nready\n", (void *)&g_idle, (void *)&g_hot);
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    return 0;
}
