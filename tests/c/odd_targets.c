/*
 * Processes that are not ordinary, for the tests that rip-probe says what
 * they are (tests/tests/true_claims.rs). `odd_targets MODE`:
 *
 * - `zombie-leader`: a worker thread waits in pause() inside
 *   worker_wait(); then the main thread exits alone (pthread_exit), leaving
 *   a zombie leader and a live process.
 * - `zombie`: forks a child that exits at once and is never reaped; prints
 *   `zombie <pid>` once it has exited.
 * - `plain`: a worker in worker_wait() and the main thread in pause().
 *
 * Each prints `worker <tid>` (and `zombie <pid>`), then `ready`.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t started = PTHREAD_COND_INITIALIZER;
static long worker_tid;

__attribute__((noinline)) void worker_wait(void)
{
	for (;;)
		pause();
}

static void *worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	worker_tid = syscall(SYS_gettid);
	pthread_cond_signal(&started);
	pthread_mutex_unlock(&lock);
	worker_wait();
	return NULL;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "plain";
	if (!strcmp(mode, "zombie")) {
		pid_t child = fork();
		if (child == 0)
			_exit(0);
		/* Waits for its exit without reaping it. */
		siginfo_t info;
		waitid(P_PID, (id_t)child, &info, WEXITED | WNOWAIT);
		printf("zombie %d\nready\n", (int)child);
		fflush(stdout);
		for (;;)
			pause();
	}
	pthread_t t;
	pthread_mutex_lock(&lock);
	pthread_create(&t, NULL, worker, NULL);
	while (worker_tid == 0)
		pthread_cond_wait(&started, &lock);
	pthread_mutex_unlock(&lock);
	printf("worker %ld\nready\n", worker_tid);
	fflush(stdout);
	if (!strcmp(mode, "zombie-leader"))
		pthread_exit(NULL);
	for (;;)
		pause();
}
