/*
 * `rip-probe offcpu` on an instrumented program: a worker snaps, sleeps
 * 30 ms, snaps again, sleeps 10 ms, in a loop; its time off the CPU splits
 * 75 % / 25 % by last snap. Prints `worker <tid>` then `ready`.
 *
 * Usage: offcpu_snaps RING
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "librip.h"

static pthread_mutex_t printed = PTHREAD_MUTEX_INITIALIZER;

static void nap(long ms)
{
	struct timespec t = { 0, ms * 1000000L };
	while (nanosleep(&t, &t) != 0)
		;
}

static void *worker(void *arg)
{
	(void)arg;
	rip_init(0, "worker", 6, 0, 0);
	printf("worker %d\n", gettid());
	fflush(stdout);
	pthread_mutex_unlock(&printed);
	for (;;) {
		rip_snap(); /* SNAP: long */
		nap(30);
		rip_snap(); /* SNAP: short */
		nap(10);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2 || !rip_create_ring(argv[1], 0))
		return 1;
	rip_init(0, "main", 4, 0, 0);
	pthread_t t;
	pthread_mutex_lock(&printed);
	pthread_create(&t, NULL, worker, NULL);
	pthread_mutex_lock(&printed);
	printf("ready\n");
	fflush(stdout);
	pthread_join(t, NULL);
	return 0;
}
