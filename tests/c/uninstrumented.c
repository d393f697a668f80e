/*
 * A program built without librip, for `rip-probe --uprobe`: each worker
 * thread loops calling worker_step(), then worker_wait(), which waits up to
 * 200 ms in poll(2) on a pipe that is never written — so a uprobe attached
 * at any time sees every worker enter worker_wait() within 200 ms. The main
 * thread prints its workers' tids and "ready", then sleeps in nanosleep.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int pipefd[2];
static volatile unsigned long sink;

__attribute__((noinline)) void worker_step(int i)
{
	sink += (unsigned long)i;
}

__attribute__((noinline)) int worker_wait(void)
{
	struct pollfd p = { .fd = pipefd[0], .events = POLLIN };
	return poll(&p, 1, 200);
}

static void *worker(void *arg)
{
	pthread_mutex_t *ready = arg;
	printf("worker %d\n", gettid());
	fflush(stdout);
	pthread_mutex_unlock(ready);
	for (int i = 0;; i++) {
		worker_step(i);
		if (worker_wait() != 0)
			return NULL;
	}
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3;
	if (pipe(pipefd) != 0)
		return 1;
	for (int i = 0; i < n; i++) {
		static pthread_mutex_t ready = PTHREAD_MUTEX_INITIALIZER;
		pthread_t t;
		pthread_mutex_lock(&ready);
		if (pthread_create(&t, NULL, worker, &ready) != 0)
			return 1;
		pthread_mutex_lock(&ready);
		pthread_mutex_unlock(&ready);
	}
	printf("ready\n");
	fflush(stdout);
	struct timespec ts = { 3600, 0 };
	nanosleep(&ts, NULL);
	return 0;
}
