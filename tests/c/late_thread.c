/*
 * A thread created while rip-probe watches: prints "ready", waits argv[1]
 * milliseconds (with "-", for a line on stdin: the test says when rip-probe
 * watches), then starts a thread named "late" that sleeps in
 * nanosleep, and writes that thread's id (as its pid namespace numbers
 * it) to the file argv[2] (renamed into place, so a reader never sees it
 * half written). The main thread then waits until stdin closes.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void *late(void *path)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp", (const char *)path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return NULL;
	fprintf(f, "%d\n", gettid());
	fclose(f);
	rename(tmp, path);
	for (;;) {
		struct timespec ts = { .tv_sec = 1000 };
		nanosleep(&ts, NULL);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: late_thread DELAY_MS TID_FILE\n");
		return 2;
	}
	long ms = atol(argv[1]);
	printf("ready\n");
	fflush(stdout);
	char c;
	if (argv[1][0] == '-') {
		while (read(0, &c, 1) > 0 && c != '\n')
			;
	} else {
		struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
		nanosleep(&ts, NULL);
	}
	pthread_t t;
	if (pthread_create(&t, NULL, late, argv[2]) != 0)
		return 1;
	pthread_setname_np(t, "late");
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
