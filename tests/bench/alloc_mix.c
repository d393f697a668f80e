/*
 * An allocation-heavy workload for the allocation sampler's cost: OPS
 * malloc/free pairs (or realloc, calloc) with a realistic size mix (most
 * blocks small, a few large), over a working set of 8,192 live blocks
 * replaced at random, and a little work on each block. Prints the CPU time
 * it took (user + system, ns): a busy machine does not add to it.
 *
 *   alloc_mix [OPS]     (default 20,000,000)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LIVE 8192

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
	static char *live[LIVE];
	volatile unsigned long sink = 0;
	uint64_t t0 = cpu_ns();
	for (long i = 0; i < ops; i++) {
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
	printf("cpu_ns %llu ops %ld\n", (unsigned long long)(cpu_ns() - t0), ops);
	return (int)(sink & 0);
}
