/*
 * Workloads whose threads' true blocked times are known from the inside,
 * for the tests that rip-probe's blocked times are true lower bounds
 * (tests/tests/blocked_bounds.rs, and rip-vmcheck on the guest kernels).
 * No librip: a plain program, built -O2.
 *
 *   blocked_bounds fresh N   N threads each print `sleeper TID T` (T:
 *                            CLOCK_MONOTONIC ns just before it blocks)
 *                            and then sleep for good in pause(2); nothing
 *                            has been blocked longer than now - T.
 *   blocked_bounds hot FILE  four threads pass a mutex, each holding it
 *                            across a 2 ms clock_nanosleep(2): each wait
 *                            (for the lock or in the sleep) is timed
 *                            around the call, and FILE (mapped shared)
 *                            holds two counters per thread, the number of
 *                            its waits done and its longest (ns): it has
 *                            not been blocked longer than that once its
 *                            count has moved past the moment asked about.
 *                            Threads print `contender TID INDEX`.
 *   blocked_bounds burn N    N threads spin: a loaded machine.
 *
 * Each prints `ready` once its threads are set up; main then waits in
 * pause(2).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t printed = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t hot = PTHREAD_MUTEX_INITIALIZER;
/* Per contender i: [2i] waits done, [2i + 1] its longest wait, ns. */
static uint64_t *counters;
static int contenders;

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void done_wait(uint64_t *mine, uint64_t since)
{
	uint64_t d = now_ns() - since;
	/* Only this thread writes its counters; the maximum is stored before
	 * the count that covers it. */
	if (d > mine[1])
		__atomic_store_n(&mine[1], d, __ATOMIC_RELAXED);
	__atomic_store_n(&mine[0], mine[0] + 1, __ATOMIC_RELEASE);
}

static void *sleeper(void *arg)
{
	(void)arg;
	uint64_t t = now_ns();
	printf("sleeper %d %llu\n", gettid(), (unsigned long long)t);
	fflush(stdout);
	pthread_mutex_unlock(&printed);
	for (;;)
		pause();
	return NULL;
}

static void *contender(void *arg)
{
	(void)arg;
	int i = contenders++;
	uint64_t *mine = &counters[2 * i];
	printf("contender %d %d\n", gettid(), i);
	fflush(stdout);
	pthread_mutex_unlock(&printed);
	for (;;) {
		uint64_t t = now_ns();
		pthread_mutex_lock(&hot);
		done_wait(mine, t);
		struct timespec two_ms = { 0, 2000000 };
		t = now_ns();
		clock_nanosleep(CLOCK_MONOTONIC, 0, &two_ms, NULL);
		done_wait(mine, t);
		pthread_mutex_unlock(&hot);
	}
	return NULL;
}

static void *burner(void *arg)
{
	(void)arg;
	volatile uint64_t x = 0;
	for (;;)
		x++;
	return NULL;
}

static void start(int n, void *(*fn)(void *))
{
	for (int i = 0; i < n; i++) {
		pthread_t t;
		pthread_mutex_lock(&printed);
		if (pthread_create(&t, NULL, fn, NULL) != 0) {
			perror("pthread_create");
			exit(1);
		}
	}
	/* The last thread has printed its line. */
	pthread_mutex_lock(&printed);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: blocked_bounds fresh N | hot FILE | burn N\n");
		return 2;
	}
	if (strcmp(argv[1], "fresh") == 0) {
		start(atoi(argv[2]), sleeper);
	} else if (strcmp(argv[1], "hot") == 0) {
		int fd = open(argv[2], O_RDWR | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || ftruncate(fd, 64) != 0) {
			perror(argv[2]);
			return 1;
		}
		counters = mmap(NULL, 64, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (counters == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		start(4, contender);
	} else if (strcmp(argv[1], "burn") == 0) {
		setvbuf(stdout, NULL, _IONBF, 0);
		for (int i = 0; i < atoi(argv[2]); i++) {
			pthread_t t;
			pthread_create(&t, NULL, burner, NULL);
		}
	} else {
		fprintf(stderr, "unknown mode %s\n", argv[1]);
		return 2;
	}
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}
