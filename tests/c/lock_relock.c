/*
 * A thread relocking a mutex it holds, for rip-probe's deadlock tests:
 * `relock-normal` locks a normal mutex twice and waits forever (a
 * self-deadlock); `relock-errorcheck` does the same with an error-checking
 * mutex, which returns EDEADLK instead (printed as `errorcheck <errno
 * name>`), then sleeps in read() holding it. Prints `role <name> <tid>`
 * per thread, then `ready` once both have relocked (the normal one is
 * about to block). Exits when stdin closes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

pthread_mutex_t g_normal = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_errorcheck;
static pthread_barrier_t relocked;
static int pipefd[2];
static pthread_mutex_t out = PTHREAD_MUTEX_INITIALIZER;

static void role(const char *name)
{
    pthread_setname_np(pthread_self(), name);
    pthread_mutex_lock(&out);
    printf("role %s %ld\n", name, (long)syscall(SYS_gettid));
    fflush(stdout);
    pthread_mutex_unlock(&out);
}

static void *relock_normal(void *arg)
{
    (void)arg;
    role("relock-normal");
    pthread_mutex_lock(&g_normal);
    pthread_barrier_wait(&relocked);
    pthread_mutex_lock(&g_normal);
    return NULL;
}

static void *relock_errorcheck(void *arg)
{
    (void)arg;
    role("relock-errorcheck");
    pthread_mutex_lock(&g_errorcheck);
    int e = pthread_mutex_lock(&g_errorcheck);
    pthread_mutex_lock(&out);
    printf("errorcheck %s\n", e == EDEADLK ? "EDEADLK" : strerror(e));
    fflush(stdout);
    pthread_mutex_unlock(&out);
    pthread_barrier_wait(&relocked);
    char c;
    while (read(pipefd[0], &c, 1) > 0)
        ;
    return NULL;
}

int main(void)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_init(&g_errorcheck, &a);
    if (pipe(pipefd) != 0) {
        perror("pipe");
        return 1;
    }
    pthread_barrier_init(&relocked, NULL, 3);
    pthread_t t1, t2;
    pthread_create(&t1, NULL, relock_normal, NULL);
    pthread_create(&t2, NULL, relock_errorcheck, NULL);
    pthread_barrier_wait(&relocked);
    printf("ready\n");
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    return 0;
}
