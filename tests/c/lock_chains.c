/*
 * Threads stuck on each other's locks, for rip-probe's wait-for tests:
 * an ABBA deadlock, a three-thread deadlock, a chain whose last owner is
 * blocked in read(), a PI mutex held by a sleeper, and a robust mutex
 * whose owner exited without the kernel marking it (its robust list was
 * unregistered), and a process-shared mutex held by a child process.
 * Prints `role <name> <tid>` per thread, then `ready` once
 * every waiter is about to block.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

pthread_mutex_t g_abba_1 = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_abba_2 = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_ring_1 = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_ring_2 = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_ring_3 = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_chain_1 = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_chain_2 = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_pi;
pthread_mutex_t g_robust;

static pthread_barrier_t abba, ring, held;
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

struct pair {
    const char *name;
    pthread_mutex_t *first, *second;
    pthread_barrier_t *barrier;
};

/* Takes `first`, waits until every thread of its group holds its own, then
 * takes `second`: held by the next thread, which never lets go. */
static void *cycle(void *arg)
{
    struct pair *p = arg;
    role(p->name);
    pthread_mutex_lock(p->first);
    pthread_barrier_wait(p->barrier);
    pthread_mutex_lock(p->second);
    return NULL;
}

static void *chain_reader(void *arg)
{
    (void)arg;
    role("reader");
    pthread_mutex_lock(&g_chain_2);
    pthread_barrier_wait(&held);
    char b;
    for (;;)
        if (read(pipefd[0], &b, 1) < 0)
            break;
    return NULL;
}

static void *chain_mid(void *arg)
{
    (void)arg;
    role("mid");
    pthread_mutex_lock(&g_chain_1);
    pthread_barrier_wait(&held);
    pthread_mutex_lock(&g_chain_2);
    return NULL;
}

static void *chain_top(void *arg)
{
    (void)arg;
    role("top");
    pthread_barrier_wait(&held);
    pthread_mutex_lock(&g_chain_1);
    return NULL;
}

static void *pi_sleeper(void *arg)
{
    (void)arg;
    role("pi-sleeper");
    pthread_mutex_lock(&g_pi);
    pthread_barrier_wait(&held);
    for (;;)
        sleep(3600);
    return NULL;
}

static void *pi_waiter(void *arg)
{
    (void)arg;
    role("pi-waiter");
    pthread_barrier_wait(&held);
    pthread_mutex_lock(&g_pi);
    return NULL;
}

/* Locks the robust mutex, unregisters its robust list (as a thread whose
 * list was corrupted would be), and exits: the kernel cannot mark the
 * mutex's owner dead, so its waiter sleeps on. */
static void *robust_leaver(void *arg)
{
    (void)arg;
    role("leaver");
    pthread_mutex_lock(&g_robust);
    syscall(SYS_set_robust_list, NULL, (size_t)24); /* sizeof(struct robust_list_head) */
    return NULL;
}

static void *robust_waiter(void *arg)
{
    (void)arg;
    role("robust-waiter");
    pthread_barrier_wait(&held);
    pthread_mutex_lock(&g_robust);
    return NULL;
}

static pthread_mutex_t *g_shared;

static void *shared_waiter(void *arg)
{
    (void)arg;
    role("shared-waiter");
    pthread_barrier_wait(&held);
    pthread_mutex_lock(g_shared);
    return NULL;
}

static pthread_t start(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    if (pthread_create(&t, NULL, fn, arg) != 0)
        abort();
    return t;
}

int main(void)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT);
    pthread_mutex_init(&g_pi, &a);
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&g_robust, &a);
    if (pipe(pipefd) != 0)
        abort();
    pthread_barrier_init(&abba, NULL, 2);
    pthread_barrier_init(&ring, NULL, 3);
    /* reader, mid, top, pi-sleeper, pi-waiter, robust-waiter,
     * shared-waiter, main */
    pthread_barrier_init(&held, NULL, 8);

    /* A process-shared mutex in shared memory, held by a child process. */
    g_shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_shared == MAP_FAILED)
        abort();
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutex_init(g_shared, &a);
    int sync[2];
    if (pipe(sync) != 0)
        abort();
    if (fork() == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        pthread_mutex_lock(g_shared);
        role("shared-holder");
        if (write(sync[1], "x", 1) != 1)
            abort();
        for (;;)
            pause();
    }
    char c;
    if (read(sync[0], &c, 1) != 1)
        abort();

    pthread_join(start(robust_leaver, NULL), NULL);
    static struct pair pairs[] = {
        {"abba-a", &g_abba_1, &g_abba_2, &abba},
        {"abba-b", &g_abba_2, &g_abba_1, &abba},
        {"ring-1", &g_ring_1, &g_ring_2, &ring},
        {"ring-2", &g_ring_2, &g_ring_3, &ring},
        {"ring-3", &g_ring_3, &g_ring_1, &ring},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        start(cycle, &pairs[i]);
    start(chain_reader, NULL);
    start(chain_mid, NULL);
    start(chain_top, NULL);
    start(pi_sleeper, NULL);
    start(pi_waiter, NULL);
    start(robust_waiter, NULL);
    start(shared_waiter, NULL);
    pthread_barrier_wait(&held);
    usleep(200 * 1000);
    pthread_mutex_lock(&out);
    printf("ready\n");
    fflush(stdout);
    pthread_mutex_unlock(&out);
    for (;;)
        pause();
}
