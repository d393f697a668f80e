/*
 * rip_snap() where optimizers move code around: as a statement whose
 * value is used, right before a tail call, and inside a static inline
 * function inlined into its caller. The test checks that each recorded
 * address symbolizes to the line of its own rip_snap().
 */
#include <stdint.h>
#include <stdio.h>

#include "librip.h"

__attribute__((noinline)) int callee(int x)
{
    __asm__ volatile("");
    return x + 1;
}

__attribute__((noinline)) int tail(int x)
{
    rip_snap(); /* SNAP: tail */
    return callee(x);
}

static inline int inlined(int x)
{
    uintptr_t a = rip_snap(); /* SNAP: inlined */
    return x + (int)(a & 1);
}

__attribute__((noinline)) int outer(int x) { return inlined(x) * 2; }

int main(int argc, char **argv)
{
    if (argc != 2 || !rip_create_ring(argv[1], 16))
        return 1;
    rip_init(0, "lines", 5, 0, 0);
    uintptr_t addr = rip_snap(); /* SNAP: main */
    printf("returned %#lx\n", (unsigned long)addr);
    int r = tail(1) + outer(2);
    return r == 0;
}
