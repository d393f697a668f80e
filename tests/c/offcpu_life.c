/*
 * Threads whose off-CPU time `rip-probe offcpu` must add up
 * (tests/tests/offcpu.rs):
 *
 *   offcpu_life loop       a thread loops sleeping 3 s (as a Python thread
 *                          in `while True: time.sleep(3)`): asleep when a
 *                          shorter window begins, off the CPU nearly all
 *                          of it. Prints `sleeper TID`.
 *   offcpu_life short FILE main starts a thread every 200 ms that sleeps
 *                          50 ms and exits, and joins it.
 *   offcpu_life storm FILE two threads start threads that sleep 50 us and
 *                          exit, and join them, without a pause.
 *
 * In `short` and `storm` each thread's creator adds its lifetime (ns, from
 * before its creation to its join) to FILE, mapped shared: [0] threads
 * ended, [1] their lifetimes summed. A thread cannot be off the CPU longer
 * than it lived. Each prints `ready`
 * once started; main then stays (pause(2), or the spawning loop).
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

static uint64_t *lives;
static pthread_mutex_t printed = PTHREAD_MUTEX_INITIALIZER;

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

__attribute__((noinline)) static void nap(long ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&t, &t) != 0)
		;
}

static void *looper(void *arg)
{
	(void)arg;
	printf("sleeper %d\n", gettid());
	fflush(stdout);
	pthread_mutex_unlock(&printed);
	for (;;)
		nap(3000);
	return NULL;
}

static void *short_lived(void *arg)
{
	(void)arg;
	nap(50);
	return NULL;
}

/* Blocks once, 50 us, and ends: every thread of the storm has one period
 * off the CPU to be charged for (a thread that never left the CPU would
 * not be in the report at all, whatever the load), and still lives far
 * less than a scheduler tick. */
static void *flash(void *arg)
{
	struct timespec t = { 0, 50000 };
	nanosleep(&t, NULL);
	return arg;
}

/* Runs one thread of `fn` to its end and adds its life to the file: timed
 * from before its creation to the return of the join, which the kernel
 * allows once the thread has left its user code and its memory (what
 * follows in its exit does not sleep). */
static void one_life(void *(*fn)(void *))
{
	uint64_t born = now_ns();
	pthread_t t;
	while (pthread_create(&t, NULL, fn, NULL) != 0)
		nap(1);
	pthread_join(t, NULL);
	__atomic_fetch_add(&lives[1], now_ns() - born, __ATOMIC_RELAXED);
	__atomic_fetch_add(&lives[0], 1, __ATOMIC_RELEASE);
}

static void *spawner(void *arg)
{
	(void)arg;
	for (;;)
		one_life(flash);
	return NULL;
}

static void map_lives(const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || ftruncate(fd, 16) != 0) {
		perror(path);
		exit(1);
	}
	lives = mmap(NULL, 16, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (lives == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: offcpu_life loop | short FILE | storm FILE\n");
		return 2;
	}
	if (strcmp(argv[1], "loop") == 0) {
		pthread_t t;
		pthread_mutex_lock(&printed);
		pthread_create(&t, NULL, looper, NULL);
		pthread_mutex_lock(&printed);
		printf("ready\n");
		fflush(stdout);
		for (;;)
			pause();
	}
	if (argc < 3) {
		fprintf(stderr, "%s needs a FILE\n", argv[1]);
		return 2;
	}
	map_lives(argv[2]);
	if (strcmp(argv[1], "short") == 0) {
		printf("ready\n");
		fflush(stdout);
		for (;;) {
			one_life(short_lived);
			nap(150);
		}
	}
	if (strcmp(argv[1], "storm") == 0) {
		pthread_t t;
		pthread_create(&t, NULL, spawner, NULL);
		pthread_create(&t, NULL, spawner, NULL);
		printf("ready\n");
		fflush(stdout);
		for (;;)
			pause();
	}
	fprintf(stderr, "unknown mode %s\n", argv[1]);
	return 2;
}
