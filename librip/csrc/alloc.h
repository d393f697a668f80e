/*
 * The allocation table's layout (docs/FORMAT.md, "The allocation table";
 * librip/src/format.rs `alloc` is the same in Rust) and the sampler's
 * entry points inside librip.
 */
#ifndef RIP_ALLOC_H
#define RIP_ALLOC_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of the region header; entries follow it. */
#define RIP_ALLOC_HEADER_SIZE 4096
/* Bytes of an entry, and the return addresses it holds. */
#define RIP_ALLOC_ENTRY_SIZE 256
#define RIP_ALLOC_FRAMES 24
/* Entries an address may be placed in, from its hash on. 64: with every
 * allocation recorded and the table half full, linear probing still
 * found 16 entries in a row taken for about one allocation in 2,000 (a
 * leak then counted short); a free looks no further than the entry it
 * finds, which is nearly always among the first few. */
#define RIP_ALLOC_PROBE 64

/* Words of the region header that change while the writer runs. */
#define RIP_ALLOC_HDR_SAMPLED 5
#define RIP_ALLOC_HDR_DROPPED 6
#define RIP_ALLOC_HDR_FREED 7

/* Words of an entry (word 0 is the state word). */
#define RIP_ALLOC_ADDR_WORD 1
#define RIP_ALLOC_SIZE_WORD 2
#define RIP_ALLOC_REQUESTED_WORD 3
#define RIP_ALLOC_THREAD_WORD 4
#define RIP_ALLOC_TIME_WORD 5
#define RIP_ALLOC_CHECK_WORD 6

/* Nonzero while this thread is inside the sampler. */
extern __thread int rip_alloc_busy __attribute__((tls_model("initial-exec")));
/* Bytes this thread may still allocate before its next sample (0: none
 * drawn yet). */
extern __thread int64_t rip_alloc_left __attribute__((tls_model("initial-exec")));
/* The table's entries (null: sampling off). */
extern uint64_t *volatile rip_alloc_entries;
/* Per-bucket counts of live sampled addresses, saturating at 255 (a
 * saturated bucket stays so): the second look of a free that the hint
 * below let through. */
#define RIP_ALLOC_FILTER_BITS 13
extern uint8_t rip_alloc_filter[1u << RIP_ALLOC_FILTER_BITS];
/* The first look of every free: one bit per group of 8 buckets (set while
 * any of them counts a live sample), 32 bits to a word beside a 32-bit
 * version that every change increments (so that a change computed from
 * stale counts fails its compare-and-swap). 256 bytes: four cache lines
 * that every free touches stay in the first-level cache, where the 8 KiB
 * of counts were evicted by the program's own blocks. */
#define RIP_ALLOC_GROUP_SHIFT 3
#define RIP_ALLOC_HINT_WORDS ((1u << RIP_ALLOC_FILTER_BITS) >> RIP_ALLOC_GROUP_SHIFT >> 5)
extern uint64_t rip_alloc_hint[RIP_ALLOC_HINT_WORDS];

/* Whether an allocation of `size` bytes is to be sampled (counts it). */
int rip_alloc_should_sample(size_t size);
/* The same past the countdown: draws the next distance. */
int rip_alloc_should_sample_slow(size_t size);

/* The countdown inline (the interposer's every call): one TLS
 * subtraction and a predictable branch. Nonzero when this call crossed
 * the thread's countdown (or drew none yet): rip_alloc_should_sample_slow
 * then decides. */
static inline __attribute__((always_inline)) int rip_alloc_countdown(size_t size)
{
    if (__builtin_expect(rip_alloc_entries == 0, 1))
        return 0;
    int64_t left = rip_alloc_left - (int64_t)size;
    if (__builtin_expect(left > 0, 1)) {
        rip_alloc_left = left;
        return 0;
    }
    return 1;
}

static inline __attribute__((always_inline)) int rip_alloc_sample_now(size_t size)
{
    return rip_alloc_countdown(size) && rip_alloc_should_sample_slow(size);
}

static inline unsigned rip_alloc_filter_slot(uint64_t addr)
{
    return (unsigned)((addr >> 4) * 0x9e3779b97f4a7c15ULL >> (64 - RIP_ALLOC_FILTER_BITS));
}

/* Whether `ptr` may be in the table (inline: every free asks). All hint
 * bits are clear while nothing is sampled. A relaxed load suffices: the
 * thread that frees `ptr` was given it after the thread that sampled it
 * set its bit, and the bit is cleared only once no address of its group
 * is counted (rip_alloc_forget). */
static inline __attribute__((always_inline)) int rip_alloc_maybe_sampled(const void *ptr)
{
    unsigned group = rip_alloc_filter_slot((uint64_t)(uintptr_t)ptr) >> RIP_ALLOC_GROUP_SHIFT;
    uint64_t w = __atomic_load_n(&rip_alloc_hint[group >> 5], __ATOMIC_RELAXED);
    return (int)((w >> (group & 31)) & 1);
}
/* Records a sampled allocation with the stack from `caller` (the return
 * address of the interposed function) outwards; where `caller` is 0 or not
 * found, `skip` frames above rip_alloc_record are left out. */
void rip_alloc_record(void *ptr, size_t requested, size_t size, uintptr_t caller, unsigned skip);
/* Removes `ptr` from the table if it was sampled (before the real free). */
void rip_alloc_forget(void *ptr);
/* Points the sampler at a table (null: off). */
void rip_alloc_configure(uint64_t *region, uint64_t capacity, uint64_t mean);

#endif
