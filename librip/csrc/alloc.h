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
#define RIP_ALLOC_HDR_FILE_FULL 8

/* Words of an entry (word 0 is the state word). */
#define RIP_ALLOC_ADDR_WORD 1
#define RIP_ALLOC_SIZE_WORD 2
#define RIP_ALLOC_REQUESTED_WORD 3
#define RIP_ALLOC_THREAD_WORD 4
#define RIP_ALLOC_TIME_WORD 5
#define RIP_ALLOC_CHECK_WORD 6

/* Nonzero while this thread is inside the sampler. */
extern __thread int rip_alloc_busy __attribute__((tls_model("initial-exec")));
/* Bytes this thread has allocated past its next sample point: negative
 * while the point is still ahead (by that many bytes), 0 or more once an
 * allocation reached it. Starts at 0, so a thread's first allocation
 * goes to rip_alloc_should_sample_slow, which draws the first distance. */
extern __thread int64_t rip_alloc_past __attribute__((tls_model("initial-exec")));
/* The table's entries (null: sampling off). */
extern uint64_t *volatile rip_alloc_entries;

/* The first look of every free: a count of live sampled addresses per
 * bucket of the address's bits 4-15, saturating at 255 (a saturated
 * bucket stays so; the bootstrap buffer's blocks are marked so too). The
 * bits are taken as they are, without a hash: two instructions. 4 KiB:
 * the share of frees it lets through to the second look is about the
 * share of buckets holding a live sample, which a program with a large
 * heap raises (jq holding a 28 MB document's tree, hundreds of samples
 * live at the default mean: about one free in six went on to the second
 * look with 1,024 buckets, one in sixty with 4,096, by callgrind's counts
 * of the second look's instructions). A table small
 * enough to stay in the first-level cache was the reason for 1 KiB; on
 * alloc_mix, which keeps about ten samples live, 4 KiB measured the same
 * (paired rounds, sampling: +2.58 % against +2.65 % in 150, +2.69 %
 * against +2.78 % in 120). Blocks of a page-aligned allocator (glibc's mmapped
 * chunks) fall in 16 buckets. */
#ifndef RIP_ALLOC_NEAR_SHIFT
#define RIP_ALLOC_NEAR_SHIFT 4
#endif
#define RIP_ALLOC_NEAR_BUCKETS (65536u >> RIP_ALLOC_NEAR_SHIFT)
extern uint8_t rip_alloc_near[RIP_ALLOC_NEAR_BUCKETS];
/* The second and third looks, one cache line per bucket of the first.
 *
 * The second: a word that names the bucket's live sampled address when it
 * has exactly one (nearly always: a few samples are live among 4,096
 * buckets at the default rate), so a free that shares the bucket with a
 * sample is told apart from it by one compare. The frees the first look
 * lets through have addresses anywhere in the heap, but the lines they
 * read are those of the few buckets that hold samples, which stay cached;
 * a count per bucket of a hash of the whole address over 64 KiB (the third
 * look as it was) was a random line each time: cachegrind on alloc_mix at
 * 512 KiB put it at about five last-level misses per sample, half of all
 * the sampler's. Bits 0-14: the live sampled addresses in the bucket
 * (saturating); bit 15: the address in bits 16-63 is not that of the one
 * live sample (a second one came and one of the two went, or it does not
 * fit in 48 bits); bits 16-63: the first sample's address. Changed with
 * compare-and-swap only (plain read-modify-writes while the process has
 * one thread: nothing else can change it meanwhile).
 *
 * The third, for a bucket with more than one sample: a count per
 * sub-bucket of a hash of the address, saturating at 255 as the first
 * look's counts do. In the bucket's own line, so that a sample and its
 * free write one line besides the first look's, not two. */
#define RIP_ALLOC_OWNER_COUNT 0x7fffu
#define RIP_ALLOC_OWNER_INEXACT 0x8000u
#define RIP_ALLOC_SUB_BUCKETS 56u
struct rip_alloc_bucket {
    uint64_t owner;
    uint8_t sub[RIP_ALLOC_SUB_BUCKETS];
} __attribute__((aligned(64)));
extern struct rip_alloc_bucket rip_alloc_buckets[RIP_ALLOC_NEAR_BUCKETS];

static inline __attribute__((always_inline)) unsigned rip_alloc_near_slot(const void *ptr)
{
#if defined(__x86_64__)
    /* One zero-extending move where the compiler writes a move and a mask. */
    unsigned low;
    __asm__("movzwl %w1, %0" : "=r"(low) : "r"(ptr));
    return low >> RIP_ALLOC_NEAR_SHIFT;
#else
    return (unsigned)(uint16_t)(uintptr_t)ptr >> RIP_ALLOC_NEAR_SHIFT;
#endif
}

/* The sub-bucket of an address in its bucket's line: a hash of the
 * address (the bits that choose the bucket included, which changes
 * nothing) scaled to the sub-buckets. */
static inline unsigned rip_alloc_sub_slot(uint64_t addr)
{
    uint64_t h = (addr >> 4) * 0x9e3779b97f4a7c15ULL >> 32;
    return (unsigned)(h * RIP_ALLOC_SUB_BUCKETS >> 32);
}

/* Whether an allocation of `size` bytes is to be sampled (counts it). */
int rip_alloc_should_sample(size_t size);
/* Past the countdown (rip_alloc_past is 0 or more, this call's size
 * included): whether to sample this call; draws the next distance. */
int rip_alloc_should_sample_slow(size_t size);

/* The countdown inline (the interposer's every call): one add into the
 * thread-local count and a predictable branch, with no test of whether
 * sampling is on (when it is off, rip_alloc_should_sample_slow puts the
 * next sample point 1 MiB ahead, to look again then). Nonzero when this
 * call reached the thread's sample point: rip_alloc_should_sample_slow
 * then decides. */
static inline __attribute__((always_inline)) int rip_alloc_countdown(size_t size)
{
    int64_t past = rip_alloc_past + (int64_t)size;
    rip_alloc_past = past;
    return __builtin_expect(past >= 0, 0);
}

static inline __attribute__((always_inline)) int rip_alloc_sample_now(size_t size)
{
    return rip_alloc_countdown(size) && rip_alloc_should_sample_slow(size);
}

/* Whether `ptr` may be in the table (inline: every free asks). A relaxed
 * load suffices: the thread that frees `ptr` was given it after the
 * thread that sampled it counted it here, and the count of `ptr`'s bucket
 * comes down only once `ptr` itself is forgotten. */
static inline __attribute__((always_inline)) int rip_alloc_maybe_sampled(const void *ptr)
{
    /* A plain load: used once, it is one load whatever the compiler does,
     * and a byte load is single-copy atomic on every target. As a relaxed
     * atomic load it costs a second instruction (a load, then a test,
     * where this is one compare with memory). */
    return rip_alloc_near[rip_alloc_near_slot(ptr)] != 0;
}

/* Marks `ptr`'s bucket saturated, for good: its frees and reallocs then
 * take the slow path (the interposer's bootstrap blocks, which the real
 * allocator must never see). */
void rip_alloc_mark_forever(const void *ptr);

/* Where a walk starts: an instruction's address and the stack and frame
 * pointers there. */
struct rip_alloc_regs {
    uint64_t ip, sp, bp;
};

#if defined(__x86_64__)
/* The registers at this point of the calling function (the address is the
 * instruction after the lea, where rsp and rbp are read). */
#define RIP_ALLOC_HERE(r)                                                                          \
    __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"                       \
                     : "=r"((r).ip), "=r"((r).sp), "=r"((r).bp))
#else
#define RIP_ALLOC_HERE(r) ((r).ip = (r).sp = (r).bp = 0)
#endif

/* Walks the calling thread's stack by its CFI from `from` (taken by
 * RIP_ALLOC_HERE in the calling function), with each address's rule
 * cached (unwind.c): writes up to `max` return addresses, from the one
 * into that function's caller outwards, and returns how many; -1 when a
 * frame needs more than the cached rules say (then walk it with
 * _Unwind_Backtrace, as before). */
int rip_alloc_unwind(const struct rip_alloc_regs *from, uint64_t *out, unsigned max);
/* Starts loading the cached rules the calling thread's last walk used
 * first: called once a sample is decided, before its allocation is made. */
void rip_alloc_unwind_warm(void);

/* Starts loading what recording a sample of `ptr` will write (its first
 * entry, counts and counters): called as soon as the sampled address is
 * known, before the rest of the sample's work. */
void rip_alloc_prefetch(const void *ptr);
/* Records a sampled allocation with the stack from `caller` (the return
 * address of the interposed function) outwards; where `caller` is 0 or not
 * found, `skip` frames above rip_alloc_record are left out. */
void rip_alloc_record(void *ptr, size_t requested, size_t size, uintptr_t caller, unsigned skip);
/* The same with the walk starting at `here` (taken by RIP_ALLOC_HERE in
 * the interposed function's slow path): the stack from the return address
 * into that function's caller. */
void rip_alloc_record_at(const struct rip_alloc_regs *here, void *ptr, size_t requested,
                         size_t size, uintptr_t caller, unsigned skip);
/* Removes `ptr` from the table if it was sampled (before the real free). */
void rip_alloc_forget(void *ptr);
/* The same, once rip_alloc_maybe_sampled(ptr) and
 * rip_alloc_sampled_in_bucket(ptr) said yes. */
void rip_alloc_forget_looked(void *ptr);

/* Whether `ptr` may be in the table, once rip_alloc_maybe_sampled(ptr)
 * said yes: the second look, and the third where the bucket holds more
 * than one sample (then rip_alloc_forget_looked). A live sampled `ptr` is
 * counted in its bucket's word from before the program had it until after
 * it is forgotten, and the word changes by compare-and-swap only (or, in a
 * process with one thread, by its only writer): a count
 * of one with the exact flag names `ptr` itself whenever `ptr` is live. */
static inline __attribute__((always_inline)) int rip_alloc_sampled_in_bucket(const void *ptr)
{
    const struct rip_alloc_bucket *b = &rip_alloc_buckets[rip_alloc_near_slot(ptr)];
    uint64_t w = __atomic_load_n(&b->owner, __ATOMIC_RELAXED);
    if (__builtin_expect((w & (RIP_ALLOC_OWNER_COUNT | RIP_ALLOC_OWNER_INEXACT)) == 1, 1))
        return w >> 16 == (uint64_t)(uintptr_t)ptr;
    /* A plain load, as in rip_alloc_maybe_sampled. */
    return (w & RIP_ALLOC_OWNER_COUNT) != 0 &&
           b->sub[rip_alloc_sub_slot((uint64_t)(uintptr_t)ptr)] != 0;
}
/* Points the sampler at a table (null: off) whose header and first
 * `reserved` entries have their pages reserved in the file. */
void rip_alloc_configure(uint64_t *region, uint64_t capacity, uint64_t mean, uint64_t reserved);

#endif
