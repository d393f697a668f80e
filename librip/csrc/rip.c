/*
 * The C half of librip: the thread-local snap cursor shared by Rust and C
 * (Rust reads and writes it in place, with the initial-exec model), the
 * sink that catches snaps of threads without a slot, and the non-inline
 * rip_snap. Everything else is in Rust.
 */
#include <stdint.h>

#include "librip.h"

/* Sequence word followed by RIP_MAX_DEPTH entries, like a slot's tail. */
struct rip_sink {
    uint64_t seq;
    uint64_t entries[RIP_MAX_DEPTH];
};

/* Snaps of threads without a slot land here; seq counts them (racily). */
struct rip_sink rip_sink __attribute__((aligned(64)));

/* Initially the sink, so a snap never needs a branch. */
__thread uint64_t *rip_cursor __attribute__((tls_model("initial-exec"))) = &rip_sink.seq;

/*
 * The out-of-line snap (librip.h makes `rip_snap()` the inline one; the
 * parentheses keep that macro out of this definition). The return address
 * minus one lies inside the caller's call instruction, so it symbolizes to
 * the caller's line rather than the next one.
 */
__attribute__((noinline)) uintptr_t(rip_snap)(void)
{
    uint64_t addr = (uint64_t)__builtin_extract_return_addr(__builtin_return_address(0)) - 1;
    uint64_t *cur = rip_cursor;
    uint64_t seq = __atomic_load_n(cur, __ATOMIC_RELAXED);
    uint64_t mask = __atomic_load_n(&rip_mask, __ATOMIC_RELAXED);
    __atomic_store_n(&cur[1 + (seq & mask)], (seq << 48) | addr, __ATOMIC_RELAXED);
    /* Release keeps the entry store first (a plain mov on x86-64). */
    __atomic_store_n(cur, seq + 1, __ATOMIC_RELEASE);
    return (uintptr_t)addr;
}
