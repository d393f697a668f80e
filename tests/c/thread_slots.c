/*
 * Threads that come and go, for the sched_switch program's per-thread
 * slots. Prints "ready", then obeys one line of stdin at a time:
 *   churn N   starts N threads one after the other, each sleeping 1 ms
 *             and exiting before the next starts; prints "churned"
 *   block N   starts N threads that block in read(2) on a pipe for good;
 *             prints "blocked TID..." once each is asleep
 * and exits at end of input.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int gate[2];

static void nap(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static void *brief(void *arg)
{
	(void)arg;
	nap(1);
	return NULL;
}

static void *blocked(void *tid)
{
	*(pid_t *)tid = gettid();
	char c;
	for (;;)
		if (read(gate[0], &c, 1) < 0)
			nap(1000);
	return NULL;
}

int main(void)
{
	if (pipe(gate) != 0)
		return 1;
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	char line[64];
	while (fgets(line, sizeof line, stdin)) {
		long n = 0;
		if (sscanf(line, "churn %ld", &n) == 1) {
			for (long i = 0; i < n; i++) {
				pthread_t t;
				if (pthread_create(&t, NULL, brief, NULL) != 0)
					return 1;
				pthread_join(t, NULL);
			}
			printf("churned\n");
		} else if (sscanf(line, "block %ld", &n) == 1 && n > 0 && n <= 64) {
			static pid_t tids[64];
			for (long i = 0; i < n; i++) {
				pthread_t t;
				if (pthread_create(&t, NULL, blocked, &tids[i]) != 0)
					return 1;
			}
			/* Each is in read(2) long before this. */
			nap(200);
			printf("blocked");
			for (long i = 0; i < n; i++)
				printf(" %d", tids[i]);
			printf("\n");
		}
	}
	return 0;
}
