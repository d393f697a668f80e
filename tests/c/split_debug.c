/* A program shipped as distributions ship theirs: built with -g, its DWARF
 * split off (`objcopy --only-keep-debug`) and the binary stripped of
 * everything else but its build-id (tests/tests/debug_info.rs). Prints
 * `ready`, then blocks reading stdin in `split_wait`. VARIANT makes
 * builds with distinct build-ids. */
#include <stdio.h>
#include <unistd.h>

#ifndef VARIANT
#define VARIANT 1
#endif

__attribute__((noinline)) static int split_wait(void)
{
	char c;
	return (int)read(0, &c, 1); /* split_wait: the read */
}

__attribute__((noinline)) int split_outer(void)
{
	int r = split_wait();
	__asm__ volatile("" ::: "memory");
	return r + VARIANT;
}

int main(void)
{
	printf("ready\n");
	fflush(stdout);
	return split_outer();
}
