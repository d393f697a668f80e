/*
 * A program that knows nothing of librip, for the allocation sampler
 * (run with LD_PRELOAD of librip's shared library, or linked with it).
 *
 *   alloc_leaks leak N SIZE   frees many allocations of mixed sizes made by
 *                             churn() and leaks N of SIZE bytes from
 *                             leak_here() (called by leak_path()); prints
 *                             "ready" and waits for a line on stdin.
 *   alloc_leaks storm T       T threads allocate and free (every member of
 *                             the malloc family) while the main thread
 *                             forks children that allocate, fork handlers
 *                             that allocate, and exit; prints "storm ok"
 *                             when all threads and children finished.
 *   alloc_leaks buckets       allocates blocks aligned to 64 KiB (so that
 *                             every one shares the sampler's buckets of
 *                             the address's low bits) and frees them in
 *                             every order, four at a time, and interleaved,
 *                             first with one thread, then again in a
 *                             second thread (which also frees four blocks
 *                             the first made while it was alone); leaks
 *                             one such block of 77 bytes; prints "buckets
 *                             ok".
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) void churn(unsigned i)
{
	static const size_t sizes[] = { 16, 24, 32, 48, 64, 100, 128, 200, 256, 512, 1000, 4096, 20000 };
	char *p = malloc(sizes[i % (sizeof sizes / sizeof sizes[0])]);
	p[0] = (char)i;
	sink += (unsigned long)p[0];
	free(p);
}

__attribute__((noinline)) void *leak_here(size_t size)
{
	char *p = malloc(size);
	memset(p, 1, size);
	return p;
}

__attribute__((noinline)) void leak_path(size_t size)
{
	void *p = leak_here(size);
	sink += (unsigned long)p & 1;
}

static int leak(unsigned n, size_t size)
{
	for (unsigned i = 0; i < n * 50; i++) {
		churn(i);
		if (i % 50 == 0)
			leak_path(size);
	}
	printf("ready\n");
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		return 0;
	return 0;
}

static void *storm_thread(void *arg)
{
	unsigned seed = (unsigned)(unsigned long)arg;
	void *keep[64] = { 0 };
	for (unsigned i = 0; i < 200000; i++) {
		unsigned k = (seed = seed * 1103515245u + 12345u) >> 16;
		void **slot = &keep[k % 64];
		free(*slot);
		switch (k % 7) {
		case 0: *slot = malloc(k % 3000 + 1); break;
		case 1: *slot = calloc(k % 10 + 1, 24); break;
		case 2: *slot = realloc(malloc(32), k % 5000 + 1); break;
		case 3: if (posix_memalign(slot, 64, k % 700 + 1)) *slot = 0; break;
		case 4: *slot = aligned_alloc(32, 64 * (k % 9 + 1)); break;
		case 5: *slot = memalign(128, k % 900 + 1); break;
		default: *slot = valloc(k % 100 + 1); break;
		}
		if (*slot)
			sink += malloc_usable_size(*slot) & 1;
	}
	for (unsigned i = 0; i < 64; i++)
		free(keep[i]);
	return 0;
}

static void *fork_handler_block;
static void in_parent(void) { free(fork_handler_block); fork_handler_block = 0; }
static void before(void) { fork_handler_block = malloc(77); }
static void in_child(void) { free(fork_handler_block); fork_handler_block = malloc(99); }

static int storm(unsigned threads)
{
	pthread_atfork(before, in_parent, in_child);
	pthread_t t[64];
	if (threads > 64)
		threads = 64;
	for (unsigned i = 0; i < threads; i++)
		pthread_create(&t[i], 0, storm_thread, (void *)(unsigned long)(i + 1));
	int forks = 0;
	for (int f = 0; f < 20; f++) {
		pid_t pid = fork();
		if (pid == 0) {
			/* The child allocates (its table is gone) and exits. */
			for (unsigned i = 0; i < 1000; i++)
				churn(i);
			free(fork_handler_block);
			_exit(0);
		}
		int status = 0;
		if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0) {
			fprintf(stderr, "child %d failed: status %d\n", f, status);
			return 1;
		}
		forks++;
	}
	for (unsigned i = 0; i < threads; i++)
		pthread_join(t[i], 0);
	printf("storm ok %d forks\n", forks);
	fflush(stdout);
	return 0;
}

/* The blocks of `buckets`: 64 KiB-aligned, so their bits 4-15 are all
 * zero. */
static void *aligned_block(size_t size)
{
	void *p = 0;
	if (posix_memalign(&p, 65536, size))
		abort();
	sink += (unsigned long)p & 1;
	return p;
}

/* Four blocks made by the main thread, freed by bucket_orders. */
static void *held[4];

static void *bucket_orders(void *arg)
{
	(void)arg;
	/* Every order of freeing four blocks of one bucket: whichever goes
	 * first, last or between, the others are still told sampled. */
	static const char perms[24][4] = {
		{0,1,2,3},{0,1,3,2},{0,2,1,3},{0,2,3,1},{0,3,1,2},{0,3,2,1},
		{1,0,2,3},{1,0,3,2},{1,2,0,3},{1,2,3,0},{1,3,0,2},{1,3,2,0},
		{2,0,1,3},{2,0,3,1},{2,1,0,3},{2,1,3,0},{2,3,0,1},{2,3,1,0},
		{3,0,1,2},{3,0,2,1},{3,1,0,2},{3,1,2,0},{3,2,0,1},{3,2,1,0},
	};
	for (unsigned k = 0; k < 24; k++) {
		void *b[4];
		for (unsigned i = 0; i < 4; i++)
			b[i] = aligned_block(64 + 16 * i);
		for (unsigned i = 0; i < 4; i++)
			free(b[(int)perms[k][i]]);
	}
	/* Interleaved: the bucket's count goes 1, 2, 1, 2, ... with the
	 * oldest freed each time, then up to 8 and down from the newest. */
	void *prev = aligned_block(64);
	for (unsigned i = 0; i < 50; i++) {
		void *next = aligned_block(64 + i);
		free(prev);
		prev = next;
	}
	free(prev);
	void *stack[8];
	for (unsigned i = 0; i < 8; i++)
		stack[i] = aligned_block(100 + i);
	for (unsigned i = 8; i-- > 0;)
		free(stack[i]);
	for (unsigned i = 0; i < 4; i++)
		free(held[i]);
	return 0;
}

/* The orders first while the process has one thread (the sampler then
 * updates its counts with plain stores), then in a second thread, which
 * frees blocks placed while the first was alone (atomically, as every
 * update from then on). */
static int buckets(void)
{
	for (unsigned i = 0; i < 4; i++)
		held[i] = aligned_block(300 + 16 * i);
	bucket_orders(0);
	for (unsigned i = 0; i < 4; i++)
		held[i] = aligned_block(300 + 16 * i);
	pthread_t t;
	if (pthread_create(&t, 0, bucket_orders, 0) != 0 || pthread_join(t, 0) != 0)
		abort();
	/* One left in the bucket, among others freed. */
	void *kept = aligned_block(77);
	for (unsigned i = 0; i < 8; i++)
		free(aligned_block(200 + i));
	sink += (unsigned long)kept & 1;
	printf("buckets ok\n");
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 4 && strcmp(argv[1], "leak") == 0)
		return leak((unsigned)atoi(argv[2]), (size_t)atol(argv[3]));
	if (argc >= 3 && strcmp(argv[1], "storm") == 0)
		return storm((unsigned)atoi(argv[2]));
	if (argc >= 2 && strcmp(argv[1], "buckets") == 0)
		return buckets();
	fprintf(stderr, "usage: alloc_leaks leak N SIZE | storm THREADS | buckets\n");
	return 2;
}
