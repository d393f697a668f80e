/*
 * The guest kernels' workload (cargo xtask vmtest; rip-vmcheck runs it):
 * a program linked statically with librip whose threads each take a snap
 * at a known line (the `SNAP:` markers, which rip-vmcheck looks up in this
 * file) and then block for good in a known syscall:
 *   pipe-reader  read(2) on a pipe nobody writes
 *   sleeper      nanosleep(2) for an hour
 *   locker       futex(2): a mutex main holds forever
 *   acceptor     accept(2) on a listening Unix socket (no network needed)
 * It prints `role NAME TID` per thread, `futex ADDR` (the mutex's futex
 * word), then `ready`, and main waits in pause(2).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "librip.h"

static int pipefd[2];
static int listener;
static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
/* Each thread unlocks it once it has named itself and printed its role. */
static pthread_mutex_t started = PTHREAD_MUTEX_INITIALIZER;

static void announce(const char *role)
{
	rip_init(0, role, strlen(role), 0, 0);
	printf("role %s %d\n", role, gettid());
	fflush(stdout);
	pthread_mutex_unlock(&started);
}

static void *pipe_reader(void *arg)
{
	char c;
	(void)arg;
	announce("pipe-reader");
	RIP_SNAP(); /* SNAP: pipe-reader */
	return (void *)(long)read(pipefd[0], &c, 1);
}

static void *sleeper(void *arg)
{
	struct timespec ts = { 3600, 0 };
	(void)arg;
	announce("sleeper");
	RIP_SNAP(); /* SNAP: sleeper */
	return (void *)(long)nanosleep(&ts, NULL);
}

static void *locker(void *arg)
{
	(void)arg;
	announce("locker");
	RIP_SNAP(); /* SNAP: locker */
	pthread_mutex_lock(&held);
	return NULL;
}

static void *acceptor(void *arg)
{
	(void)arg;
	announce("acceptor");
	RIP_SNAP(); /* SNAP: acceptor */
	return (void *)(long)accept(listener, NULL, NULL);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: vm_stuck RING\n");
		return 2;
	}
	if (!rip_create_ring(argv[1], 0))
		return 1;
	rip_init(0, "main", 4, 0, 0);
	if (pipe(pipefd) != 0)
		return 1;
	/* An abstract Unix socket: needs no file system and no loopback. */
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path + 1, sizeof sa.sun_path - 1, "rip-vm-stuck-%d", getpid());
	listener = socket(AF_UNIX, SOCK_STREAM, 0);
	if (listener < 0 || bind(listener, (struct sockaddr *)&sa, sizeof sa) != 0 ||
	    listen(listener, 1) != 0)
		return 1;
	pthread_mutex_lock(&held);
	void *(*roles[])(void *) = { pipe_reader, sleeper, locker, acceptor };
	for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++) {
		pthread_t t;
		pthread_mutex_lock(&started);
		if (pthread_create(&t, NULL, roles[i], NULL) != 0)
			return 1;
	}
	pthread_mutex_lock(&started);
	printf("futex %p\n", (void *)&held);
	printf("ready\n");
	fflush(stdout);
	RIP_SNAP(); /* SNAP: main */
	for (;;)
		pause();
}
