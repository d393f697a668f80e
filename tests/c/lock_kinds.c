/*
 * Threads blocked on every kind of glibc lock, each held by a known
 * thread, for rip-probe's lock-owner tests. Prints, for each waiter,
 * `wait <name> <waiter tid> <lock address> <owner tid|->`, the holder's
 * tid as `holder <tid>`, then `ready` once every waiter is about to block.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { NORMAL, RECURSIVE, ERRORCHECK, ADAPTIVE, ROBUST, PI, ROBUST_PI, EXITED, NMUTEX };
static const char *const names[NMUTEX] = {"normal", "recursive", "errorcheck", "adaptive",
                                          "robust", "pi", "robust_pi", "exited"};
static pthread_mutex_t mutexes[NMUTEX];
static pthread_rwlock_t rw_read = PTHREAD_RWLOCK_INITIALIZER;  /* a reader waits */
static pthread_rwlock_t rw_write = PTHREAD_RWLOCK_INITIALIZER; /* a writer waits */
static pthread_rwlock_t rw_readers = PTHREAD_RWLOCK_INITIALIZER; /* read-locked, a writer waits */
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t cond_mutex = PTHREAD_MUTEX_INITIALIZER;
static pid_t holder, gone;
static pthread_mutex_t out = PTHREAD_MUTEX_INITIALIZER;

static pid_t tid(void) { return (pid_t)syscall(SYS_gettid); }

static void say(const char *name, const void *lock, pid_t owner)
{
    pthread_mutex_lock(&out);
    if (owner > 0)
        printf("wait %s %d %p %d\n", name, tid(), lock, owner);
    else
        printf("wait %s %d %p -\n", name, tid(), lock);
    fflush(stdout);
    pthread_mutex_unlock(&out);
}

static void *mutex_waiter(void *arg)
{
    long i = (long)arg;
    say(names[i], &mutexes[i], i == EXITED ? gone : holder);
    pthread_mutex_lock(&mutexes[i]);
    return NULL;
}

static void *reader(void *arg)
{
    (void)arg;
    say("rwlock_reader", &rw_read, holder);
    pthread_rwlock_rdlock(&rw_read);
    return NULL;
}

static void *writer(void *arg)
{
    (void)arg;
    say("rwlock_writer", &rw_write, holder);
    pthread_rwlock_wrlock(&rw_write);
    return NULL;
}

static void *writer_after_readers(void *arg)
{
    (void)arg;
    say("rwlock_readers", &rw_readers, 0);
    pthread_rwlock_wrlock(&rw_readers);
    return NULL;
}

static void *cond_waiter(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&cond_mutex);
    say("condvar", &cond, 0);
    for (;;)
        pthread_cond_wait(&cond, &cond_mutex);
    return NULL;
}

/* Takes the "exited" mutex and ends without unlocking it. */
static void *leaver(void *arg)
{
    (void)arg;
    gone = tid();
    pthread_mutex_lock(&mutexes[EXITED]);
    return NULL;
}

static void start(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    if (pthread_create(&t, NULL, fn, arg) != 0)
        abort();
}

int main(void)
{
    holder = tid();
    for (int i = 0; i < NMUTEX; i++) {
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        if (i == RECURSIVE)
            pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
        if (i == ERRORCHECK)
            pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
        if (i == ADAPTIVE)
            pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
        if (i == ROBUST || i == ROBUST_PI)
            pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
        if (i == PI || i == ROBUST_PI)
            pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT);
        if (pthread_mutex_init(&mutexes[i], &a) != 0)
            abort();
        if (i != EXITED && pthread_mutex_lock(&mutexes[i]) != 0)
            abort();
    }
    pthread_t t;
    pthread_create(&t, NULL, leaver, NULL);
    pthread_join(t, NULL);
    pthread_rwlock_wrlock(&rw_read);
    pthread_rwlock_wrlock(&rw_write);
    pthread_rwlock_rdlock(&rw_readers);
    printf("holder %d\n", holder);
    for (long i = 0; i < NMUTEX; i++)
        start(mutex_waiter, (void *)i);
    start(reader, NULL);
    start(writer, NULL);
    start(writer_after_readers, NULL);
    start(cond_waiter, NULL);
    usleep(100 * 1000);
    pthread_mutex_lock(&out);
    printf("ready\n");
    fflush(stdout);
    pthread_mutex_unlock(&out);
    for (;;)
        pause();
}
