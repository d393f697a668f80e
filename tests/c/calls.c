/*
 * A program built without librip (and, by the tests, -O2 without frame
 * pointers), for `rip-probe calls`. It prints "ready", then runs commands
 * read from stdin, one per line, on its main thread, calling heartbeat()
 * every 2 ms between them:
 *
 *   count N      N calls of count_me()
 *   short N      N calls of sleep_short(), each sleeping 2.2 ms
 *   long N       N calls of sleep_long(), each sleeping 17 ms
 *                (just above 2^21 and 2^24 ns: the most room before the
 *                next log2 bucket for a wakeup delayed by a busy machine)
 *   op MS N      N calls of op(), each sleeping MS ms
 *   recurse N    recurse(N): N nested calls, each sleeping 3 ms before
 *                the next, so the call at depth d lasts (N - d) * 3 ms
 *   churn N K    N threads, 8 at a time, each calling count_me() K
 *                times and exiting (a program whose threads come and go)
 *   exit         exit
 *
 * With an argument FILE, the short and long commands also write each
 * call's duration as the caller measures it (`sleep_short NS`), so a test
 * can tell a late wakeup on a busy machine from a wrong measurement.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;
static FILE *spans;

static long long now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void sleep_us(long us)
{
	struct timespec t = { us / 1000000, (us % 1000000) * 1000L };
	while (nanosleep(&t, &t) != 0)
		;
}

static void sleep_ms(long ms)
{
	sleep_us(ms * 1000);
}

__attribute__((noinline)) void heartbeat(void)
{
	sink++;
}

__attribute__((noinline)) void count_me(int i)
{
	sink += (unsigned long)i;
}

__attribute__((noinline)) void sleep_short(void)
{
	sleep_us(2200);
	sink++;
}

__attribute__((noinline)) void sleep_long(void)
{
	sleep_us(17000);
	sink++;
}

__attribute__((noinline)) void op(long ms)
{
	sleep_ms(ms);
	sink++;
}

__attribute__((noinline)) void recurse(int n)
{
	sleep_ms(3);
	if (n > 1)
		recurse(n - 1);
	sink++; /* not a tail call: each level returns through its own frame */
}

/* The callers the outliers name. */
__attribute__((noinline)) void do_sleeps(const char *what, long n)
{
	for (long i = 0; i < n; i++) {
		long long start = now_ns();
		if (strcmp(what, "short") == 0)
			sleep_short();
		else
			sleep_long();
		if (spans)
			fprintf(spans, "sleep_%s %lld\n", what, now_ns() - start);
	}
	if (spans)
		fflush(spans);
}

__attribute__((noinline)) void do_ops(long ms, long n)
{
	for (long i = 0; i < n; i++)
		op(ms);
}

static void *churn_thread(void *k)
{
	for (long i = 0; i < (long)k; i++)
		count_me((int)i);
	return NULL;
}

static void churn(long n, long k)
{
	for (long done = 0; done < n; done += 8) {
		pthread_t t[8];
		int m = n - done < 8 ? (int)(n - done) : 8;
		for (int i = 0; i < m; i++)
			if (pthread_create(&t[i], NULL, churn_thread, (void *)k) != 0)
				exit(1);
		for (int i = 0; i < m; i++)
			pthread_join(t[i], NULL);
	}
}

int main(int argc, char **argv)
{
	if (argc > 1 && !(spans = fopen(argv[1], "w")))
		return 1;
	/* Unbuffered, so poll(2) on fd 0 sees every line not yet read. */
	setvbuf(stdin, NULL, _IONBF, 0);
	printf("ready\n");
	fflush(stdout);
	char line[128];
	for (;;) {
		struct pollfd p = { .fd = 0, .events = POLLIN };
		if (poll(&p, 1, 2) == 0) {
			heartbeat();
			continue;
		}
		if (!fgets(line, sizeof line, stdin))
			return 0;
		char cmd[16] = "";
		long a = 0, b = 0;
		sscanf(line, "%15s %ld %ld", cmd, &a, &b);
		if (strcmp(cmd, "count") == 0)
			for (long i = 0; i < a; i++)
				count_me((int)i);
		else if (strcmp(cmd, "short") == 0 || strcmp(cmd, "long") == 0)
			do_sleeps(cmd, a);
		else if (strcmp(cmd, "op") == 0)
			do_ops(a, b);
		else if (strcmp(cmd, "recurse") == 0)
			recurse((int)a);
		else if (strcmp(cmd, "churn") == 0)
			churn(a, b);
		else if (strcmp(cmd, "exit") == 0)
			return 0;
	}
}
