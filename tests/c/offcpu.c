/*
 * Known off-CPU shares for `rip-probe offcpu`, in a program without librip
 * built -O2 without frame pointers (the test adds -fomit-frame-pointer):
 *
 *   offcpu ratio   a worker loops sleeping 30 ms in sleep_long() then
 *                  10 ms in sleep_short(): 75 % and 25 % of its time off
 *                  the CPU; the main thread waits in pthread_join all along.
 *   offcpu spin    two threads spin in spin() on the same CPU: each is
 *                  preempted (runnable, off the CPU) about half the time.
 *
 * Each thread prints `<role> <tid>`, then the program prints `ready`.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;
static pthread_mutex_t printed = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) static void nap(long ms)
{
	struct timespec t = { 0, ms * 1000000L };
	while (nanosleep(&t, &t) != 0)
		;
}

__attribute__((noinline)) void sleep_long(void)
{
	nap(30);
	__asm__ volatile("");
}

__attribute__((noinline)) void sleep_short(void)
{
	nap(10);
	__asm__ volatile("");
}

static void announce(const char *role)
{
	printf("%s %d\n", role, gettid());
	fflush(stdout);
	pthread_mutex_unlock(&printed);
}

static void *sleeper(void *arg)
{
	(void)arg;
	announce("sleeper");
	for (;;) {
		sleep_long();
		sleep_short();
	}
	return NULL;
}

__attribute__((noinline)) void spin(void)
{
	for (unsigned long i = 0;; i++)
		sink += i;
}

static void *spinner(void *arg)
{
	(void)arg;
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	sched_setaffinity(0, sizeof one, &one);
	announce("spinner");
	spin();
	return NULL;
}

int main(int argc, char **argv)
{
	int spinning = argc > 1 && strcmp(argv[1], "spin") == 0;
	int n = spinning ? 2 : 1;
	pthread_t t[2];
	for (int i = 0; i < n; i++) {
		pthread_mutex_lock(&printed);
		pthread_create(&t[i], NULL, spinning ? spinner : sleeper, NULL);
	}
	pthread_mutex_lock(&printed);
	printf("ready\n");
	fflush(stdout);
	pthread_join(t[0], NULL);
	return 0;
}
