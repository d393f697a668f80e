/*
 * A service of several processes, for rip-probe's reports of many
 * processes and for `rip-probe serve`: the parent forks CHILDREN
 * children, each named NAME (comm) and titled "svc: worker I" (its
 * argv rewritten in place, as PostgreSQL and nginx title their
 * processes), each with THREADS pool threads blocked on the mutex
 * `g_pool_lock` its main thread holds, and with "deadlock", two more
 * threads in an ABBA deadlock (`g_abba_1`, `g_abba_2`) in child 0.
 *
 *   service NAME CHILDREN THREADS [deadlock] PADDING
 *
 * PADDING is a long argument that makes room for the titles. Children
 * die with the parent (PR_SET_PDEATHSIG). Prints `child PID` for each
 * child once every one of its threads is about to block, then `ready`;
 * the parent then waits for its standard input to close.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

pthread_mutex_t g_pool_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_abba_1 = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_abba_2 = PTHREAD_MUTEX_INITIALIZER;

static pthread_barrier_t started, abba;

static void *pool_thread(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&started);
    pthread_mutex_lock(&g_pool_lock);
    pthread_mutex_unlock(&g_pool_lock);
    return NULL;
}

static void *abba_thread(void *arg)
{
    int first = (int)(long)arg;
    pthread_mutex_t *a = first ? &g_abba_1 : &g_abba_2;
    pthread_mutex_t *b = first ? &g_abba_2 : &g_abba_1;
    pthread_mutex_lock(a);
    pthread_barrier_wait(&abba);
    pthread_barrier_wait(&started);
    pthread_mutex_lock(b);
    return NULL;
}

/* Rewrites the process title: the whole argument area, from argv[0] to
 * the end of the last argument, holds the title and NULs. */
static void set_title(int argc, char **argv, const char *title)
{
    char *start = argv[0];
    char *end = argv[argc - 1] + strlen(argv[argc - 1]);
    size_t room = (size_t)(end - start);
    memset(start, 0, room);
    strncpy(start, title, room - 1);
}

static void child(int argc, char **argv, const char *name, int index, int threads,
                  int deadlock, int report)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    prctl(PR_SET_NAME, name);
    char title[64];
    snprintf(title, sizeof title, "svc: worker %d", index);
    set_title(argc, argv, title);
    int abba_threads = deadlock && index == 0 ? 2 : 0;
    pthread_barrier_init(&started, NULL, (unsigned)(threads + abba_threads + 1));
    pthread_barrier_init(&abba, NULL, 2);
    pthread_mutex_lock(&g_pool_lock);
    pthread_t t;
    for (int i = 0; i < threads; i++)
        if (pthread_create(&t, NULL, pool_thread, NULL) != 0)
            exit(2);
    for (int i = 0; i < abba_threads; i++)
        if (pthread_create(&t, NULL, abba_thread, (void *)(long)i) != 0)
            exit(2);
    pthread_barrier_wait(&started);
    /* Every thread is past the barrier, on its way to its lock. */
    char line[32];
    int n = snprintf(line, sizeof line, "child %d\n", (int)getpid());
    if (write(report, line, (size_t)n) != n)
        exit(3);
    close(report);
    for (;;)
        pause();
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: service NAME CHILDREN THREADS [deadlock] PADDING\n");
        return 2;
    }
    const char *name = argv[1];
    int children = atoi(argv[2]);
    int threads = atoi(argv[3]);
    int deadlock = argc > 5 && strcmp(argv[4], "deadlock") == 0;
    int p[2];
    if (pipe(p) != 0)
        return 1;
    for (int i = 0; i < children; i++) {
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid == 0) {
            close(p[0]);
            child(argc, argv, name, i, threads, deadlock, p[1]);
        }
    }
    close(p[1]);
    FILE *in = fdopen(p[0], "r");
    char line[64];
    for (int i = 0; i < children; i++) {
        if (!fgets(line, sizeof line, in))
            return 1;
        fputs(line, stdout);
    }
    puts("ready");
    fflush(stdout);
    while (getchar() != EOF)
        ;
    /* The children die with the parent (PR_SET_PDEATHSIG). */
    return 0;
}
