/*
 * The allocation sampler's bookkeeping, called by the malloc-family
 * interposer (alloc_interpose.c) and by Rust's `librip::alloc::Sampled`.
 *
 * Sampling is by bytes: each thread counts down a distance drawn from an
 * exponential distribution of mean `rip_alloc_mean`; the allocation that
 * crosses zero is sampled. Every allocated byte is thus a sample point with
 * probability 1/mean, independently, and an allocation of s bytes is
 * sampled with probability 1 - exp(-s/mean), which the reader divides by.
 *
 * A sampled allocation gets an entry in the ring file's allocation table
 * (docs/FORMAT.md, "The allocation table"): an open-addressed table keyed
 * by address, each entry guarded by its own state word (free, writing,
 * live) with a generation and a check word over its fields. No lock: an
 * entry is claimed with one compare-and-swap, filled, and published with a
 * release store, so a process killed at any instruction leaves every entry
 * free, live and whole, or marked "writing" (the reader counts it torn).
 *
 * free() of an allocation that was never sampled must stay cheap: a
 * private bit per group of buckets, set while the group counts a live
 * sampled address, answers "certainly not sampled" with one load from
 * 256 bytes for nearly every free; the per-bucket counts behind it, then
 * the table, are read only when the bit is set.
 *
 * Everything here may run inside malloc: it never allocates, never locks
 * and calls only the unwinder, whose own mallocs the per-thread guard
 * sends straight to the real allocator.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <unwind.h>

#include "alloc.h"

/* Region header (docs/FORMAT.md). */
#define RA_ENTRY_WORDS (RIP_ALLOC_ENTRY_SIZE / 8)
#define RA_FRAME0 8

/* Entry states, in the low two bits of word 0 (above them: generation). */
#define RA_FREE 0u
#define RA_WRITING 1u
#define RA_LIVE 2u

/* The table in the ring file (null: sampling off), its capacity (a power
 * of two), the region header's counters and the sampling mean. */
uint64_t *volatile rip_alloc_entries;
#define ra_entries rip_alloc_entries
static uint64_t *ra_header;
static uint64_t ra_mask;
static uint64_t ra_mean;

/* Per-bucket counts of live sampled addresses, and the hint bits over
 * them (private memory; alloc.h). */
uint8_t rip_alloc_filter[1u << RIP_ALLOC_FILTER_BITS];
#define ra_filter rip_alloc_filter
uint64_t rip_alloc_hint[RIP_ALLOC_HINT_WORDS] __attribute__((aligned(64)));

/* Bytes left before this thread's next sample (0: not drawn yet). */
__thread int64_t rip_alloc_left __attribute__((tls_model("initial-exec")));
#define ra_left rip_alloc_left
/* The thread's id, once asked (0: not yet; reset in a forked child). */
static __thread uint32_t ra_tid __attribute__((tls_model("initial-exec")));
/* The thread's random state (0: not seeded). */
static __thread uint64_t ra_rng __attribute__((tls_model("initial-exec")));
/* Set while this thread is inside the sampler or the real allocator on
 * the sampler's behalf: nested calls are not sampled. */
__thread int rip_alloc_busy __attribute__((tls_model("initial-exec")));

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static uint64_t table_hash(uint64_t addr) { return mix(addr >> 4); }

#define filter_slot rip_alloc_filter_slot

/* The check word: a hash of the live state word and the entry's other
 * words up to its last recorded frame, so that a torn or reused entry
 * fails it (docs/FORMAT.md). One multiply per word: it is computed for
 * every sample. */
static uint64_t check_of(const uint64_t *w, uint64_t state)
{
    uint64_t n = w[RIP_ALLOC_THREAD_WORD] >> 32;
    if (n > RIP_ALLOC_FRAMES)
        n = RIP_ALLOC_FRAMES;
    uint64_t h = state ^ 0x52495041u;
    for (unsigned i = 1; i < RA_FRAME0 + n; i++) {
        if (i == RIP_ALLOC_CHECK_WORD)
            continue;
        h = (h ^ w[i]) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 32;
    }
    return mix(h);
}

/* -ln(u) for u in (0, 1]: frexp and the atanh series of ln on [1, 2)
 * (error below 1e-6); no libm in the allocator's path. */
static double neg_ln(double u)
{
    union {
        double d;
        uint64_t b;
    } v = {.d = u};
    int e = (int)((v.b >> 52) & 0x7ff) - 1023;
    v.b = (v.b & ((1ULL << 52) - 1)) | (1023ULL << 52);
    double m = v.d; /* [1, 2) */
    double z = (m - 1) / (m + 1), z2 = z * z;
    double ln_m = 2 * z * (1 + z2 * (1.0 / 3 + z2 * (1.0 / 5 + z2 * (1.0 / 7 + z2 * (1.0 / 9)))));
    return -(e * 0.6931471805599453 + ln_m);
}

static uint64_t next_random(void)
{
    uint64_t x = ra_rng;
    if (x == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        x = mix((uint64_t)(uintptr_t)&ra_rng ^ ((uint64_t)ts.tv_nsec << 20) ^
                (uint64_t)syscall(SYS_gettid)) | 1;
    }
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    ra_rng = x;
    return x * 0x2545f4914f6cdd1dULL;
}

/* An exponential distance of mean ra_mean, at least 1. */
static int64_t draw(void)
{
    double u = (double)((next_random() >> 11) + 1) * (1.0 / 9007199254740992.0);
    double d = neg_ln(u) * (double)ra_mean;
    if (d < 1)
        return 1;
    if (d > 4e18)
        return (int64_t)4e18;
    return (int64_t)d;
}

int rip_alloc_should_sample_slow(size_t size)
{
    if (ra_entries == 0 || rip_alloc_busy)
        return 0;
    if (ra_mean == 1)
        return 1;
    int64_t left = ra_left;
    if (left == 0) {
        /* This thread's first allocation: draw its first distance. */
        left = draw() - (int64_t)size;
        if (left > 0) {
            ra_left = left;
            return 0;
        }
    }
    ra_left = draw();
    return 1;
}

int rip_alloc_should_sample(size_t size) { return rip_alloc_sample_now(size); }

/* Frames of the sampler itself (this file and the interposed function)
 * at most, above the allocator's caller. */
#define RA_OWN_FRAMES 8

/* Whether any bucket of `slot`'s group counts a live address. */
static int group_counts(unsigned slot)
{
    unsigned first = slot & ~((1u << RIP_ALLOC_GROUP_SHIFT) - 1);
    for (unsigned i = 0; i < 1u << RIP_ALLOC_GROUP_SHIFT; i++)
        if (__atomic_load_n(&ra_filter[first + i], __ATOMIC_SEQ_CST) != 0)
            return 1;
    return 0;
}

/* Adds `d` to a bucket's count unless it is saturated (then it stays),
 * then sets its group's hint bit to whether the group counts anything.
 * Every step is sequentially consistent and each hint change bumps its
 * word's version: a change computed from counts read before another
 * thread's count change fails its compare-and-swap when that thread's own
 * change came first, or is followed by it. So once a sampler has set the
 * bit (before its malloc returns), only a change that read the counts
 * after the address was forgotten clears it: no free of a live sampled
 * address is ever let through (which would leave a false leak). */
static void filter_add(unsigned slot, int d)
{
    uint8_t c = __atomic_load_n(&ra_filter[slot], __ATOMIC_SEQ_CST);
    while (c != 255 && !__atomic_compare_exchange_n(&ra_filter[slot], &c, (uint8_t)(c + d), 1,
                                                     __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    unsigned group = slot >> RIP_ALLOC_GROUP_SHIFT;
    uint64_t *word = &rip_alloc_hint[group >> 5];
    uint64_t bit = 1ULL << (group & 31);
    uint64_t w = __atomic_load_n(word, __ATOMIC_SEQ_CST);
    for (;;) {
        uint64_t bits = group_counts(slot) ? (w | bit) : (w & ~bit);
        uint64_t next = (bits & 0xffffffffULL) | (((w >> 32) + 1) << 32);
        if (__atomic_compare_exchange_n(word, &w, next, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            return;
    }
}

struct frames {
    uint64_t out[RIP_ALLOC_FRAMES + RA_OWN_FRAMES];
    unsigned n, skip;
};

static _Unwind_Reason_Code one_frame(struct _Unwind_Context *ctx, void *arg)
{
    struct frames *f = arg;
    uintptr_t ip = _Unwind_GetIP(ctx);
    if (ip == 0)
        return _URC_END_OF_STACK;
    if (f->skip > 0) {
        f->skip--;
        return _URC_NO_REASON;
    }
    f->out[f->n++] = ip;
    return f->n == RIP_ALLOC_FRAMES + RA_OWN_FRAMES ? _URC_END_OF_STACK : _URC_NO_REASON;
}

void rip_alloc_record(void *ptr, size_t requested, size_t size, uintptr_t caller, unsigned skip)
{
    uint64_t *entries = ra_entries;
    if (entries == 0 || ptr == 0)
        return;
    int was_busy = rip_alloc_busy;
    rip_alloc_busy = 1;

    uint64_t w[RA_ENTRY_WORDS];
    memset(w, 0, sizeof w);
    w[RIP_ALLOC_ADDR_WORD] = (uint64_t)(uintptr_t)ptr;
    w[RIP_ALLOC_SIZE_WORD] = size;
    w[RIP_ALLOC_REQUESTED_WORD] = requested;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    w[RIP_ALLOC_TIME_WORD] = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    /* The unwinder may call malloc (the guard sends it to the real one).
     * The stack starts at `caller` (the allocator's caller) when it is
     * found among the first frames, else after `skip` frames. */
    struct frames f = {.n = 0, .skip = 1};
    _Unwind_Backtrace(one_frame, &f);
    unsigned from = skip < f.n ? skip : f.n;
    for (unsigned i = 0; caller && i < f.n && i < RA_OWN_FRAMES; i++) {
        if (f.out[i] == caller) {
            from = i;
            break;
        }
    }
    unsigned n = f.n - from < RIP_ALLOC_FRAMES ? f.n - from : RIP_ALLOC_FRAMES;
    memcpy(&w[RA_FRAME0], &f.out[from], n * sizeof(uint64_t));
    if (ra_tid == 0)
        ra_tid = (uint32_t)syscall(SYS_gettid);
    w[RIP_ALLOC_THREAD_WORD] = (uint64_t)ra_tid | (uint64_t)n << 32;

    uint64_t h = table_hash(w[RIP_ALLOC_ADDR_WORD]);
    int placed = 0;
    for (unsigned i = 0; i < RIP_ALLOC_PROBE && !placed; i++) {
        uint64_t *e = entries + ((h + i) & ra_mask) * RA_ENTRY_WORDS;
        uint64_t st = __atomic_load_n(&e[0], __ATOMIC_RELAXED);
        if ((st & 3) != RA_FREE)
            continue;
        uint64_t claimed = (st & ~3ULL) + 4 + RA_WRITING;
        if (!__atomic_compare_exchange_n(&e[0], &st, claimed, 0, __ATOMIC_ACQUIRE,
                                         __ATOMIC_RELAXED))
            continue;
        uint64_t live = claimed - RA_WRITING + RA_LIVE;
        w[RIP_ALLOC_CHECK_WORD] = check_of(w, live);
        for (unsigned k = 1; k < RA_FRAME0 + n; k++)
            __atomic_store_n(&e[k], w[k], __ATOMIC_RELAXED);
        __atomic_store_n(&e[0], live, __ATOMIC_RELEASE);
        filter_add(filter_slot(w[RIP_ALLOC_ADDR_WORD]), 1);
        placed = 1;
    }
    __atomic_fetch_add(&ra_header[placed ? RIP_ALLOC_HDR_SAMPLED : RIP_ALLOC_HDR_DROPPED], 1,
                       __ATOMIC_RELAXED);
    rip_alloc_busy = was_busy;
}

void rip_alloc_forget(void *ptr)
{
    uint64_t *entries = ra_entries;
    uint64_t addr = (uint64_t)(uintptr_t)ptr;
    if (entries == 0 || ptr == 0)
        return;
    if (!rip_alloc_maybe_sampled(ptr))
        return;
    unsigned fs = filter_slot(addr);
    if (__atomic_load_n(&ra_filter[fs], __ATOMIC_RELAXED) == 0)
        return;
    uint64_t h = table_hash(addr);
    for (unsigned i = 0; i < RIP_ALLOC_PROBE; i++) {
        uint64_t *e = entries + ((h + i) & ra_mask) * RA_ENTRY_WORDS;
        uint64_t st = __atomic_load_n(&e[0], __ATOMIC_ACQUIRE);
        if ((st & 3) != RA_LIVE || __atomic_load_n(&e[RIP_ALLOC_ADDR_WORD], __ATOMIC_RELAXED) != addr)
            continue;
        /* Only the owner of `ptr` frees it: nobody else moves this entry. */
        __atomic_store_n(&e[0], (st & ~3ULL) | RA_FREE, __ATOMIC_RELEASE);
        filter_add(fs, -1);
        __atomic_fetch_add(&ra_header[RIP_ALLOC_HDR_FREED], 1, __ATOMIC_RELAXED);
        return;
    }
}

void rip_alloc_configure(uint64_t *region, uint64_t capacity, uint64_t mean)
{
    if (region == 0) {
        /* In a forked child (its only thread is the forking one): stop,
         * and forget the parent's thread id. */
        __atomic_store_n(&ra_entries, 0, __ATOMIC_RELEASE);
        ra_tid = 0;
        return;
    }
    ra_header = region;
    ra_mask = capacity - 1;
    ra_mean = mean ? mean : 1;
    memset(ra_filter, 0, sizeof ra_filter);
    memset(rip_alloc_hint, 0, sizeof rip_alloc_hint);
    __atomic_store_n(&ra_entries, region + RIP_ALLOC_HEADER_SIZE / 8, __ATOMIC_RELEASE);
}

/* Sampling state of the calling thread, for the fork child (the forking
 * thread continues with its countdown; nothing to reset) and for tests. */
int rip_alloc_enabled(void) { return ra_entries != 0; }

/* Changes the mean of future draws and restarts the calling thread's
 * countdown (the bench compares means in one process; the region header
 * keeps the mean the ring was made with). */
void rip_alloc_bench_mean(uint64_t mean)
{
    ra_mean = mean ? mean : 1;
    ra_left = 0;
}
