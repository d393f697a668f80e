/*
 * An allocation-heavy workload for the allocation sampler's cost: OPS
 * malloc/free pairs (or realloc, calloc) with a realistic size mix (most
 * blocks small, a few large), over a working set of 8,192 live blocks
 * replaced at random, and a little work on each block. One call path
 * leaks: every LEAK_EVERY operations, leak_here() allocates LEAK_BYTES it
 * never frees, among the many freed blocks, so a leak tool can be asked
 * whether it names that function. Prints the CPU time the operations took
 * (user + system, ns: a busy machine does not add to it), the blocks
 * leaked.
 *
 *   alloc_mix [OPS [wait]]     (default 20,000,000)
 *
 * With "wait", it prints "ready PID" and waits for a line on stdin before
 * the operations (so a tool can attach first), and after its report,
 * with every other block freed, it waits for stdin to close (so the
 * tool sees the leaked blocks outstanding in a live process).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#define LIVE 8192
#define LEAK_EVERY 10000
#define LEAK_BYTES 1024

/* The last block leaked: written so the allocation is not optimized
 * away, overwritten so the earlier ones are unreachable. */
static char *volatile leaked;

__attribute__((noinline)) static void leak_here(long i)
{
	char *p = malloc(LEAK_BYTES);
	p[0] = (char)i;
	leaked = p;
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* 60 % 16-64 B, 30 % 64-512 B, 9 % 512 B-4 KiB, 1 % 4-64 KiB. */
static size_t size_of(uint64_t r)
{
	unsigned p = (unsigned)(r % 100);
	r >>= 8;
	if (p < 60)
		return 16 + r % 49;
	if (p < 90)
		return 64 + r % 449;
	if (p < 99)
		return 512 + r % 3585;
	return 4096 + r % 61441;
}

static uint64_t cpu_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv)
{
	long ops = argc > 1 ? atol(argv[1]) : 20000000;
	int wait = argc > 2 && strcmp(argv[2], "wait") == 0;
	static char *live[LIVE];
	volatile unsigned long sink = 0;
	char line[64];
	long nleaked = 0;
	if (wait) {
		printf("ready %d\n", (int)getpid());
		fflush(stdout);
		if (!fgets(line, sizeof line, stdin))
			return 1;
	}
	uint64_t t0 = cpu_ns();
	for (long i = 0; i < ops; i++) {
		if (i % LEAK_EVERY == LEAK_EVERY - 1) {
			leak_here(i);
			nleaked++;
		}
		uint64_t r = next();
		char **slot = &live[r % LIVE];
		size_t n = size_of(r >> 13);
		switch ((r >> 60) & 7) {
		case 0:
			*slot = realloc(*slot, n);
			break;
		case 1:
			free(*slot);
			*slot = calloc(1, n);
			break;
		default:
			free(*slot);
			*slot = malloc(n);
			break;
		}
		(*slot)[0] = (char)i;
		(*slot)[n - 1] = (char)i;
		sink += (unsigned char)(*slot)[0];
	}
	for (unsigned i = 0; i < LIVE; i++)
		free(live[i]);
	uint64_t t = cpu_ns() - t0;
	printf("cpu_ns %llu ops %ld leaked %ld\n", (unsigned long long)t, ops, nleaked);
	fflush(stdout);
	if (wait)
		while (fgets(line, sizeof line, stdin))
			;
	return (int)(sink & 0);
}
