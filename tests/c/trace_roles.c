/*
 * A process whose threads each do one known thing, for `rip-probe
 * record`'s trace: "sleeper" sleeps 10 ms in nanosleep in a loop,
 * "spinner" never leaves the CPU of its own accord, "reader" blocks in
 * read() on a pipe nothing is ever written to, "snapper" snaps through
 * librip then sleeps 5 ms, in a loop; the main thread waits in
 * pthread_join. Prints `<name> <tid>` for each thread once it is about
 * to start its loop, then `ready`. With SNAPLOG, the snapper appends a
 * line per snap to that file: `<seq> <before> <after>`, its snap's
 * sequence number (its count of snaps) and CLOCK_MONOTONIC ns read just
 * before and just after the snap, so a test can tell when each was taken.
 *
 * Usage: trace_roles RING [SNAPLOG]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "librip.h"

static pthread_mutex_t printed = PTHREAD_MUTEX_INITIALIZER;
static int g_pipe[2];
static volatile unsigned long g_spins;
static int g_snaplog = -1;

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void nap(long ms)
{
	struct timespec t = { 0, ms * 1000000L };
	while (nanosleep(&t, &t) != 0)
		;
}

/* Names the calling thread and says its tid, then lets main go on. */
static void started(const char *name)
{
	pthread_setname_np(pthread_self(), name);
	printf("%s %d\n", name, gettid());
	fflush(stdout);
	pthread_mutex_unlock(&printed);
}

static void *sleeper(void *arg)
{
	(void)arg;
	started("sleeper");
	for (;;)
		nap(10);
	return NULL;
}

static void *spinner(void *arg)
{
	(void)arg;
	started("spinner");
	for (;;)
		g_spins++;
	return NULL;
}

static void *reader(void *arg)
{
	(void)arg;
	started("reader");
	char c;
	for (;;)
		if (read(g_pipe[0], &c, 1) <= 0)
			nap(1000);
	return NULL;
}

static void *snapper(void *arg)
{
	(void)arg;
	rip_init(0, "snapper", 7, 0, 0);
	started("snapper");
	for (uint64_t seq = 0;; seq++) {
		uint64_t before = now_ns();
		rip_snap(); /* SNAP: tick */
		uint64_t after = now_ns();
		if (g_snaplog >= 0)
			dprintf(g_snaplog, "%llu %llu %llu\n", (unsigned long long)seq,
				(unsigned long long)before, (unsigned long long)after);
		nap(5);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3 || !rip_create_ring(argv[1], 0) || pipe(g_pipe) != 0)
		return 1;
	if (argc == 3 && (g_snaplog = open(argv[2], O_WRONLY | O_CREAT | O_APPEND, 0600)) < 0)
		return 1;
	void *(*roles[])(void *) = { sleeper, spinner, reader, snapper };
	pthread_t t[4];
	for (int i = 0; i < 4; i++) {
		pthread_mutex_lock(&printed);
		pthread_create(&t[i], NULL, roles[i], NULL);
	}
	pthread_mutex_lock(&printed);
	printf("ready\n");
	fflush(stdout);
	pthread_join(t[0], NULL);
	return 0;
}
