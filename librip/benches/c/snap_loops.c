/*
 * Loops of n snaps for the snap benchmark and the instruction-count test:
 * librip's inline snap, its non-inline rip_snap, and a snap equivalent to
 * the original librip header, next to an empty loop. Every loop carries the
 * same empty asm so the compiler keeps the same loop shape in each.
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>

#include "librip.h"

#define KEEP(i) __asm__ volatile("" : : "r"(i))

void rip_loop_c_empty(uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        KEEP(i);
}

void rip_loop_c_inline(uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        RIP_SNAP();
        KEEP(i);
    }
}

/* The original name, `rip_snap()`: the inline snap too. */
void rip_loop_c_rip_snap(uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        rip_snap();
        KEEP(i);
    }
}

/* The exported out-of-line snap, called (the parentheses skip the macro). */
void rip_loop_c_call(uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        (rip_snap)();
        KEEP(i);
    }
}

/*
 * The original header's scheme: thread-local tid, index and counter
 * (defined by the consumer: original_storage.c here, so this translation
 * unit sees them as extern, as the header's users did)
 * and a global ring pointer; each snap indexes the ring by tid.
 */
struct orig_proc {
    uint64_t buf[RIP_DEFAULT_DEPTH];
};

struct orig_ring {
    uint64_t mask;
    struct orig_proc procs[];
};

extern __thread pid_t orig_rip_tid;
extern __thread uint8_t orig_rip_idx;
extern __thread uint8_t orig_rip_ctr;
extern struct orig_ring *orig_rip_ring;

static inline __attribute__((always_inline)) void orig_snap(void)
{
    uint64_t rip;
    __asm__ volatile("leaq 0(%%rip), %0" : "=r"(rip));
    orig_rip_ring->procs[orig_rip_tid].buf[orig_rip_idx++ & orig_rip_ring->mask] =
        ((uint64_t)orig_rip_ctr++ << 48) | rip;
}

/* A private ring of `procs` slots for the original-style loop. */
int rip_loop_original_setup(uint32_t procs, pid_t tid)
{
    if (orig_rip_ring == NULL) {
        orig_rip_ring = calloc(1, sizeof(struct orig_ring) + (size_t)procs * sizeof(struct orig_proc));
        if (orig_rip_ring == NULL)
            return -1;
        orig_rip_ring->mask = RIP_DEFAULT_DEPTH - 1;
    }
    orig_rip_tid = tid % (pid_t)procs;
    return 0;
}

/*
 * The memory clobber stands for the code around a real call site (any call
 * would do the same): without it the compiler keeps the thread-locals in
 * registers across iterations, which no snap between other code gets.
 * librip's own snaps carry the same clobber.
 */
void rip_loop_original(uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        orig_snap();
        __asm__ volatile("" : : : "memory");
        KEEP(i);
    }
}
