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
 * by address, filled from its start (a zone that widens as samples need
 * room), each entry guarded by its own state word (free, writing, live)
 * with a generation and a check word over its fields. No lock: an
 * entry is claimed with one compare-and-swap (a plain store while the
 * process has only one thread), filled, and published with a release
 * store, so a process killed at any instruction leaves every entry
 * free, live and whole, or marked "writing" (the reader counts it torn).
 *
 * free() of an allocation that was never sampled must stay cheap: a
 * private count of live sampled addresses per bucket of the address's
 * low bits answers "certainly not sampled" with one load from 4 KiB for
 * nearly every free (alloc.h); the bucket's word naming its one live
 * sample, or where it has more, a count per bucket of a hash of the
 * address and then the table, are read only when the first is not zero.
 *
 * The stack of a sample is walked by the address's cached CFI rules
 * (unwind.c), and by libgcc's _Unwind_Backtrace where those cannot say.
 *
 * Everything here may run inside malloc: it never allocates, never locks
 * and calls only the unwinder, whose own mallocs the per-thread guard
 * sends straight to the real allocator.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unwind.h>

#include "alloc.h"
#include "unwind.h"

/* Linux 5.14's; older headers lack it (older kernels say EINVAL). */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

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

/* glibc's own "this process has only ever had one thread" (2.32 on; its
 * malloc takes no lock while it is set, and it is cleared before a second
 * thread starts, never set again but in a forked child). Weak: another C
 * library, or an older glibc, leaves it null, and every update below is
 * then atomic. */
extern char __libc_single_threaded __attribute__((weak));

/* Whether this thread is the process's only one: then the sampler's
 * read-modify-writes of its shared words (the counts, the bucket words,
 * the header's counters, an entry's claim) need no lock prefix, since
 * nothing else can write them meanwhile (the reader, in another process,
 * only reads). A locked instruction waits for every store before it to
 * leave the store buffer, and an allocation-heavy program's stores miss
 * the caches: a sample and its free made nine of them. */
static inline int ra_alone(void)
{
    return &__libc_single_threaded != 0 &&
           __atomic_load_n(&__libc_single_threaded, __ATOMIC_RELAXED) != 0;
}

/* A compare-and-swap, plain when `alone` (the word cannot change under
 * it): as __atomic_compare_exchange_n, relaxed on failure. */
#define RA_CAS(p, expected, desired, alone, order)                                                 \
    ((alone) ? (__atomic_load_n((p), __ATOMIC_RELAXED) == *(expected)                             \
                    ? (__atomic_store_n((p), (desired), __ATOMIC_RELAXED), 1)                     \
                    : (*(expected) = __atomic_load_n((p), __ATOMIC_RELAXED), 0))                  \
             : __atomic_compare_exchange_n((p), (expected), (desired), 0, (order),                \
                                           __ATOMIC_RELAXED))

/* One of the region header's counters up by one, plain when `alone`. */
static inline void ra_count(unsigned word, int alone)
{
    uint64_t *c = &ra_header[word];
    if (alone)
        __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
    else
        __atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
}

/* Where samples are placed: in a zone of the table as small as the live
 * samples allow. Zone 0 is the table's first 64 entries, zone k the
 * 64 << k entries after zone k - 1's, and the last (`ra_top_level`, the
 * first as large as half the table) the whole table. Sampling moves on to
 * the next zone when more than half as many samples are live as the zone
 * holds entries, or when a sample finds none of its window's entries
 * free, and never back. An address goes among the RIP_ALLOC_PROBE entries
 * from its hash modulo the zone's size on (wrapping in the zone). With the
 * few samples a program has live at the default rate, they all lie in a
 * few pages next to the region header that the samples keep in the caches
 * and the TLB, where spread over the whole table (4 MiB by default) each
 * sample and each sampled free touched a page and a line of its own.
 * alloc_mix at a 64 KiB mean, paired runs: a sample cost about 345 ns
 * over the whole table and 250 ns with the table cut to 256 entries;
 * without the address's early load (rip_alloc_prefetch), a sample waited
 * about 400 cycles for its entry's line (rdtscp). The zones before the
 * last do not overlap: zones that all began at the table's start piled
 * each one's long-lived samples into the first entries (python3 keeping
 * about 400 samples live filled the first hundred, and every sample that
 * hashed among them found its window taken, moved the zone on, and at the
 * last was dropped).
 *
 * A free finds its entry by looking, in each zone from the last down, at
 * the entries from its hash on up to the farthest any sample placed in
 * that zone went (`ra_reach`, raised before the sampled address is
 * returned, so its free sees it). */
#define RA_ZONE_MIN 64u
/* Zones from RA_ZONE_MIN up to the largest capacity (format.rs). */
#define RA_LEVELS 11
static uint32_t ra_level;
static uint32_t ra_top_level;
static uint32_t ra_reach[RA_LEVELS];

/* A zone: its first entry, and its size less one (a power of two). */
struct zone {
    uint64_t base, mask;
};

static struct zone zone_of(unsigned level)
{
    if (level >= ra_top_level)
        return (struct zone){0, ra_mask};
    return (struct zone){((uint64_t)RA_ZONE_MIN << level) - RA_ZONE_MIN,
                         ((uint64_t)RA_ZONE_MIN << level) - 1};
}

/* The entry `i` on from hash `h` in zone `z`. */
static uint64_t *zone_entry(uint64_t *entries, struct zone z, uint64_t h, unsigned i)
{
    return entries + (z.base + ((h + i) & z.mask)) * RA_ENTRY_WORDS;
}

/* Entries from the table's first whose pages are reserved in the file
 * (the ring's writer reserved the first zone's where the kernel can
 * reserve the rest later, else all of them; a zone after those is
 * reserved before sampling moves into it). Once reserving fails (the file
 * system is full) the region header's file_full word says so, and
 * sampling stays where it is, counting the samples it cannot place as
 * dropped. */
static uint64_t ra_reserved;

/* Reserves the pages of the entries up to `end` (a prefix of the table:
 * zones are whole pages, as is the region header). A store into a page of
 * a shared file that the file system has no room for raises SIGBUS;
 * MADV_POPULATE_WRITE reports it as an error instead. 1 when they are
 * reserved. */
static int reserve_to(uint64_t end)
{
    uint64_t have = __atomic_load_n(&ra_reserved, __ATOMIC_ACQUIRE);
    if (end <= have)
        return 1;
    uint64_t *full = &ra_header[RIP_ALLOC_HDR_FILE_FULL];
    if (__atomic_load_n(full, __ATOMIC_RELAXED))
        return 0;
    char *from = (char *)ra_entries + have * RIP_ALLOC_ENTRY_SIZE;
    if (madvise(from, (end - have) * RIP_ALLOC_ENTRY_SIZE, MADV_POPULATE_WRITE) != 0) {
        /* Also the reader's: the drops that follow are the file system's. */
        __atomic_store_n(full, 1, __ATOMIC_RELAXED);
        return 0;
    }
    while (have < end && !__atomic_compare_exchange_n(&ra_reserved, &have, end, 1,
                                                      __ATOMIC_RELEASE, __ATOMIC_ACQUIRE)) {
    }
    return 1;
}

/* Moves sampling on past zone `level` (unless another thread did), once
 * the next zone's pages are reserved; returns the zone sampling is in. */
static unsigned widen(unsigned level, int alone)
{
    if (level < ra_top_level) {
        struct zone next = zone_of(level + 1);
        if (reserve_to(next.base + next.mask + 1))
            (void)RA_CAS(&ra_level, &level, level + 1, alone, __ATOMIC_RELEASE);
    }
    return __atomic_load_n(&ra_level, __ATOMIC_ACQUIRE);
}

/* The counts of live sampled addresses by the address's low bits (the
 * first look of every free), and each such bucket's line for the second
 * and third looks (alloc.h). Private memory. */
uint8_t rip_alloc_near[RIP_ALLOC_NEAR_BUCKETS] __attribute__((aligned(64)));
struct rip_alloc_bucket rip_alloc_buckets[RIP_ALLOC_NEAR_BUCKETS];

/* Incremented each time a table is configured: a thread whose countdown
 * was drawn for another one (or for none) draws afresh. */
static uint32_t ra_generation;
/* How far ahead the next sample point is put while sampling is off: a
 * thread then asks again after this many bytes, so a table configured
 * later (sample_allocations) reaches threads that were already running. */
#define OFF_AHEAD ((int64_t)1 << 20)

__thread int64_t rip_alloc_past __attribute__((tls_model("initial-exec")));
/* The generation this thread's countdown was drawn under (0: none). */
static __thread uint32_t ra_gen __attribute__((tls_model("initial-exec")));
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

/* The check word is a hash of the live state word and the entry's other
 * words up to its last recorded frame, so that a torn or reused entry
 * fails it (docs/FORMAT.md): one multiply per word, as each is stored. */
_Static_assert(RIP_ALLOC_CHECK_WORD == 6 && RA_FRAME0 == 8, "store_checked's order");

#define STORE_CHECKED(i, v)                                                                        \
    do {                                                                                           \
        uint64_t v_ = (v);                                                                         \
        __atomic_store_n(&e[i], v_, __ATOMIC_RELAXED);                                             \
        h = (h ^ v_) * 0x9e3779b97f4a7c15ULL;                                                      \
        h ^= h >> 32;                                                                              \
    } while (0)

/* Stores an entry's words 1 to 7 but the check word (from `w`), its `n`
 * frames, and its check word. */
static void store_checked(uint64_t *e, const uint64_t *w, const uint64_t *frames, unsigned n,
                          uint64_t state)
{
    uint64_t h = state ^ 0x52495041u;
    STORE_CHECKED(1, w[1]);
    STORE_CHECKED(2, w[2]);
    STORE_CHECKED(3, w[3]);
    STORE_CHECKED(4, w[4]);
    STORE_CHECKED(5, w[5]);
    STORE_CHECKED(7, 0);
    for (unsigned i = 0; i < n; i++)
        STORE_CHECKED(RA_FRAME0 + i, frames[i]);
    __atomic_store_n(&e[RIP_ALLOC_CHECK_WORD], mix(h), __ATOMIC_RELAXED);
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
    if (ra_entries == 0) {
        rip_alloc_past = -OFF_AHEAD;
        return 0;
    }
    /* Inside the sampler: the count stays past the point, so the first
     * allocation after it is sampled. */
    if (rip_alloc_busy)
        return 0;
    uint32_t gen = __atomic_load_n(&ra_generation, __ATOMIC_ACQUIRE);
    if (ra_mean == 1) {
        /* Every call, malloc(0) included: the next one is past again. */
        ra_gen = gen;
        rip_alloc_past = 0;
        return 1;
    }
    if (ra_gen != gen) {
        /* This thread's first allocation under this table: its first
         * distance, from this allocation on. */
        ra_gen = gen;
        int64_t past = (int64_t)size - draw();
        if (past < 0) {
            rip_alloc_past = past;
            return 0;
        }
    }
    /* The sample's walk will want these lines: they load while the draw
     * and the allocation itself run. */
    rip_alloc_unwind_warm();
    rip_alloc_past = -draw();
    return 1;
}

/* The Rust allocator's question (out of line): unlike the interposer's
 * threads, a Rust thread may have allocated before the table was
 * configured, so the generation is checked first. */
int rip_alloc_should_sample(size_t size)
{
    if (ra_entries == 0)
        return 0;
    if (ra_gen != __atomic_load_n(&ra_generation, __ATOMIC_ACQUIRE))
        rip_alloc_past = 0;
    return rip_alloc_sample_now(size);
}

/* Frames of the sampler itself (this file and the interposed function)
 * at most, above the allocator's caller. */
#define RA_OWN_FRAMES 8

/* Adds `d` to a count unless it is saturated (then it stays). A count is
 * raised before the sampled address is returned to the program and
 * lowered only by the free of that address, before the real free, so
 * while it is live its buckets never read 0: no free of a live sampled
 * address is let through (which would leave a false leak). */
static void count_add(uint8_t *count, int d, int alone)
{
    uint8_t c = __atomic_load_n(count, __ATOMIC_RELAXED);
    while (c != 255 && !RA_CAS(count, &c, (uint8_t)(c + d), alone, __ATOMIC_RELAXED)) {
    }
}

/* The second look's word of `addr`'s bucket, `addr` added (d = 1) or
 * removed (d = -1); see alloc.h. A saturated count stays. */
static void owner_add(uint64_t *word, uint64_t addr, int d, int alone)
{
    uint64_t w = __atomic_load_n(word, __ATOMIC_RELAXED), next;
    do {
        uint64_t count = w & RIP_ALLOC_OWNER_COUNT;
        if (count == RIP_ALLOC_OWNER_COUNT)
            return;
        if (d > 0 && count == 0)
            /* The bucket's one sample: exact when its address fits. */
            next = addr >> 48 == 0 ? addr << 16 | 1 : RIP_ALLOC_OWNER_INEXACT | 1;
        else if (d > 0)
            next = w + 1;
        else if (count == 1)
            next = 0;
        else if (w >> 16 == addr)
            /* The named one goes: which one stays, once one is left, is
             * not known. */
            next = (w - 1) | RIP_ALLOC_OWNER_INEXACT;
        else
            /* Another goes: the named one stays (unless the flag already
             * says it went). */
            next = w - 1;
    } while (!RA_CAS(word, &w, next, alone, __ATOMIC_RELAXED));
}

static void filter_add(uint64_t addr, int d, int alone)
{
    unsigned near = rip_alloc_near_slot((const void *)(uintptr_t)addr);
    struct rip_alloc_bucket *b = &rip_alloc_buckets[near];
    owner_add(&b->owner, addr, d, alone);
    count_add(&b->sub[rip_alloc_sub_slot(addr)], d, alone);
    count_add(&rip_alloc_near[near], d, alone);
}

void rip_alloc_mark_forever(const void *ptr)
{
    struct rip_alloc_bucket *b = &rip_alloc_buckets[rip_alloc_near_slot(ptr)];
    __atomic_store_n(&b->owner, RIP_ALLOC_OWNER_COUNT, __ATOMIC_RELAXED);
    __atomic_store_n(&b->sub[rip_alloc_sub_slot((uint64_t)(uintptr_t)ptr)], 255, __ATOMIC_RELAXED);
    __atomic_store_n(&rip_alloc_near[rip_alloc_near_slot(ptr)], 255, __ATOMIC_RELAXED);
}

/* The frames as walked: the one into the walk's first function's caller
 * first. */
#define RA_WALKED (RIP_ALLOC_FRAMES + RA_OWN_FRAMES)

/* libgcc's walk: each frame's address and its function's start. */
struct frames {
    uint64_t ip[1 + RA_OWN_FRAMES + RA_WALKED];
    uint64_t func[1 + RA_OWN_FRAMES + RA_WALKED];
    unsigned n;
};

static _Unwind_Reason_Code one_frame(struct _Unwind_Context *ctx, void *arg)
{
    struct frames *f = arg;
    uintptr_t ip = _Unwind_GetIP(ctx);
    if (ip == 0)
        return _URC_END_OF_STACK;
    f->ip[f->n] = ip;
    f->func[f->n] = _Unwind_GetRegionStart(ctx);
    f->n++;
    return f->n == sizeof f->ip / sizeof f->ip[0] ? _URC_END_OF_STACK : _URC_NO_REASON;
}

/* Set (RIP_ALLOC_CHECK_UNWIND, for tests) to walk every sample's stack
 * both ways and count where they differ. */
static int ra_check_unwind;
static uint64_t ra_checked, ra_differed;

static void say(const char *line, int len)
{
    if (len > 0)
        (void)!write(2, line, (size_t)len);
}

static void report_checks(void)
{
    char line[160];
    say(line, snprintf(line, sizeof line,
                       "librip: %llu sampled stacks walked both ways, %llu differed\n",
                       (unsigned long long)__atomic_load_n(&ra_checked, __ATOMIC_RELAXED),
                       (unsigned long long)__atomic_load_n(&ra_differed, __ATOMIC_RELAXED)));
}

/* The first few stacks that differ, both ways, on stderr. */
static void say_differed(const uint64_t *ours, unsigned n, const uint64_t *theirs, unsigned m)
{
    char line[64];
    say(line, snprintf(line, sizeof line, "librip: walked %u frames, libgcc %u:\n", n, m));
    for (unsigned i = 0; i < n || i < m; i++)
        say(line, snprintf(line, sizeof line, "  %#18llx %#18llx\n",
                           (unsigned long long)(i < n ? ours[i] : 0),
                           (unsigned long long)(i < m ? theirs[i] : 0)));
}

/* The calling thread's stack by libgcc, from the frame above the one that
 * `here` is in (found by its function's start), as rip_alloc_unwind
 * gives it; the whole walk when that frame is not found. */
static __attribute__((noinline)) unsigned walk_libgcc(const struct rip_alloc_regs *here,
                                                      uint64_t *out)
{
    struct frames f = {.n = 0};
    _Unwind_Backtrace(one_frame, &f);
    struct dwarf_eh_bases bases;
    unsigned from = 0;
    if (_Unwind_Find_FDE((void *)(uintptr_t)here->ip, &bases) != 0) {
        for (unsigned i = 0; i < f.n; i++) {
            if (f.func[i] == (uint64_t)(uintptr_t)bases.func) {
                from = i + 1;
                break;
            }
        }
    }
    unsigned m = f.n - from < RA_WALKED ? f.n - from : RA_WALKED;
    memcpy(out, f.ip + from, m * sizeof(uint64_t));
    return m;
}

/* The calling thread's stack from `here` on: the return address into the
 * function `here` was taken in first. */
static unsigned walk(const struct rip_alloc_regs *here, uint64_t *out)
{
    int n = rip_alloc_unwind(here, out, RA_WALKED);
    if (__builtin_expect(n >= 0 && !ra_check_unwind, 1))
        return (unsigned)n;
    if (n < 0)
        return walk_libgcc(here, out);
    uint64_t theirs[RA_WALKED];
    unsigned m = walk_libgcc(here, theirs);
    __atomic_fetch_add(&ra_checked, 1, __ATOMIC_RELAXED);
    if ((unsigned)n != m || memcmp(out, theirs, m * sizeof(uint64_t)) != 0) {
        if (__atomic_fetch_add(&ra_differed, 1, __ATOMIC_RELAXED) < 3)
            say_differed(out, (unsigned)n, theirs, m);
    }
    return (unsigned)n;
}

/* Turns the check on (RIP_ALLOC_CHECK_UNWIND): each sample's stack is
 * walked by libgcc too, and the counts are said at exit. */
void rip_alloc_check_unwind(void)
{
    if (!ra_check_unwind && atexit(report_checks) == 0)
        ra_check_unwind = 1;
}

/* The lines a sample writes besides its stack (its entry's first two,
 * its bucket's, the region header's counters) may have left the caches
 * since a sample last touched them. Their loads start here, before the
 * sample does the work that does not need them (the usable size, the
 * clock, the stack walk), and run meanwhile. alloc_mix at 512 KiB, when
 * entries lay anywhere in the table, perf cpu-clock: rip_alloc_record_at
 * had 0.45 % of the samples, 87 % of them on the instruction after the
 * load of the entry's state word; with the loads started here, it and this
 * function had 0.27 %. */
void rip_alloc_prefetch(const void *ptr)
{
    uint64_t *entries = ra_entries;
    if (entries == 0)
        return;
    uint64_t addr = (uint64_t)(uintptr_t)ptr;
    uint64_t *e = zone_entry(entries, zone_of(__atomic_load_n(&ra_level, __ATOMIC_ACQUIRE)),
                             table_hash(addr), 0);
    __builtin_prefetch(e, 1, 3);
    __builtin_prefetch(e + RA_FRAME0, 1, 3);
    __builtin_prefetch(&rip_alloc_buckets[rip_alloc_near_slot(ptr)], 1, 3);
    __builtin_prefetch(&ra_header[RIP_ALLOC_HDR_SAMPLED], 1, 3);
}

void rip_alloc_record(void *ptr, size_t requested, size_t size, uintptr_t caller, unsigned skip)
{
    rip_alloc_prefetch(ptr);
    struct rip_alloc_regs here;
    RIP_ALLOC_HERE(here);
    rip_alloc_record_at(&here, ptr, requested, size, caller, skip);
}

void rip_alloc_record_at(const struct rip_alloc_regs *here, void *ptr, size_t requested,
                         size_t size, uintptr_t caller, unsigned skip)
{
    uint64_t *entries = ra_entries;
    if (entries == 0 || ptr == 0)
        return;
    int was_busy = rip_alloc_busy;
    rip_alloc_busy = 1;

    /* Words 1 to 5 (the frames follow from the walk; the rest of the
     * entry is neither read nor checked). */
    uint64_t w[RA_FRAME0];
    w[RIP_ALLOC_ADDR_WORD] = (uint64_t)(uintptr_t)ptr;
    w[RIP_ALLOC_SIZE_WORD] = size;
    w[RIP_ALLOC_REQUESTED_WORD] = requested;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    w[RIP_ALLOC_TIME_WORD] = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    /* libgcc's unwinder may call malloc (the guard sends it to the real
     * one). The stack starts at `caller` (the allocator's caller) when it
     * is found among the first frames, else after `skip` frames above the
     * function `here` was taken in. */
    uint64_t out[RA_WALKED];
    unsigned nf = walk(here, out);
    unsigned from = skip < nf ? skip : nf;
    for (unsigned i = 0; caller && i < nf && i < RA_OWN_FRAMES; i++) {
        if (out[i] == caller) {
            from = i;
            break;
        }
    }
    unsigned n = nf - from < RIP_ALLOC_FRAMES ? nf - from : RIP_ALLOC_FRAMES;
    if (ra_tid == 0)
        ra_tid = (uint32_t)syscall(SYS_gettid);
    w[RIP_ALLOC_THREAD_WORD] = (uint64_t)ra_tid | (uint64_t)n << 32;

    uint64_t h = table_hash(w[RIP_ALLOC_ADDR_WORD]);
    int alone = ra_alone();
    int placed = 0;
    unsigned level = __atomic_load_n(&ra_level, __ATOMIC_ACQUIRE);
    /* On to the next zone before this one is more than half full. (The
     * two counters are read apart: a count read short or wrapped only
     * moves on early.) */
    if (level < ra_top_level &&
        2 * (__atomic_load_n(&ra_header[RIP_ALLOC_HDR_SAMPLED], __ATOMIC_RELAXED) -
             __atomic_load_n(&ra_header[RIP_ALLOC_HDR_FREED], __ATOMIC_RELAXED)) >
            zone_of(level).mask) {
        level = widen(level, alone);
    }
    for (;;) {
        struct zone z = zone_of(level);
        unsigned i;
        for (i = 0; i < RIP_ALLOC_PROBE && i <= z.mask; i++) {
            uint64_t *e = zone_entry(entries, z, h, i);
            uint64_t st = __atomic_load_n(&e[0], __ATOMIC_RELAXED);
            if ((st & 3) != RA_FREE)
                continue;
            uint64_t claimed = (st & ~3ULL) + 4 + RA_WRITING;
            if (!RA_CAS(&e[0], &st, claimed, alone, __ATOMIC_ACQUIRE))
                continue;
            /* Alone, the claim was a plain store: the entry's other words
             * are still stored after it (a compiler barrier on x86). */
            __atomic_thread_fence(__ATOMIC_RELEASE);
            uint32_t reach = __atomic_load_n(&ra_reach[level], __ATOMIC_RELAXED);
            while (reach < i + 1 &&
                   !RA_CAS(&ra_reach[level], &reach, i + 1, alone, __ATOMIC_RELAXED)) {
            }
            /* The counts' read-modify-writes before the entry's stores:
             * after them, each would wait for those stores to drain first;
             * here the stores drain while the program goes on. */
            filter_add(w[RIP_ALLOC_ADDR_WORD], 1, alone);
            ra_count(RIP_ALLOC_HDR_SAMPLED, alone);
            uint64_t live = claimed - RA_WRITING + RA_LIVE;
            store_checked(e, w, out + from, n, live);
            __atomic_store_n(&e[0], live, __ATOMIC_RELEASE);
            placed = 1;
            break;
        }
        if (placed || level >= ra_top_level)
            break;
        unsigned next = widen(level, alone);
        if (next == level)
            /* The next zone could not be reserved. */
            break;
        level = next;
    }
    if (!placed)
        ra_count(RIP_ALLOC_HDR_DROPPED, alone);
    rip_alloc_busy = was_busy;
}

void rip_alloc_forget(void *ptr)
{
    if (rip_alloc_maybe_sampled(ptr) && rip_alloc_sampled_in_bucket(ptr))
        rip_alloc_forget_looked(ptr);
}

void rip_alloc_forget_looked(void *ptr)
{
    uint64_t *entries = ra_entries;
    uint64_t addr = (uint64_t)(uintptr_t)ptr;
    if (entries == 0 || ptr == 0)
        return;
    /* Each of these is a line the program has not touched since this
     * sample was taken: loaded together, their misses overlap instead of
     * following one another (the entry's, then the counts' and the
     * header's, which are written once the entry is found). */
    uint64_t h = table_hash(addr);
    unsigned top = __atomic_load_n(&ra_level, __ATOMIC_ACQUIRE);
    __builtin_prefetch(zone_entry(entries, zone_of(top), h, 0), 1, 3);
    __builtin_prefetch(&rip_alloc_buckets[rip_alloc_near_slot(ptr)], 1, 3);
    __builtin_prefetch(&ra_header[RIP_ALLOC_HDR_FREED], 1, 3);
    /* The zones from the last down: a sample lives where the zone was
     * when it was taken, and most were taken in the last. */
    for (unsigned level = top + 1; level-- > 0;) {
        struct zone z = zone_of(level);
        uint32_t reach = __atomic_load_n(&ra_reach[level], __ATOMIC_RELAXED);
        for (unsigned i = 0; i < reach; i++) {
            uint64_t *e = zone_entry(entries, z, h, i);
            uint64_t st = __atomic_load_n(&e[0], __ATOMIC_ACQUIRE);
            if ((st & 3) != RA_LIVE ||
                __atomic_load_n(&e[RIP_ALLOC_ADDR_WORD], __ATOMIC_RELAXED) != addr)
                continue;
            /* Only the owner of `ptr` frees it: nobody else moves this
             * entry, and nobody is given `ptr` again before the real
             * free, so the counts may come down first (their
             * read-modify-writes then do not wait for the entry's store
             * to drain). */
            int alone = ra_alone();
            filter_add(addr, -1, alone);
            ra_count(RIP_ALLOC_HDR_FREED, alone);
            __atomic_store_n(&e[0], (st & ~3ULL) | RA_FREE, __ATOMIC_RELEASE);
            return;
        }
    }
}

void rip_alloc_configure(uint64_t *region, uint64_t capacity, uint64_t mean, uint64_t reserved)
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
    ra_level = 0;
    /* The first zone as large as half the table is the whole table: the
     * zones before it take less than half. */
    ra_top_level = 0;
    while (((uint64_t)RA_ZONE_MIN << ra_top_level) < capacity / 2 && ra_top_level + 1 < RA_LEVELS)
        ra_top_level++;
    memset(ra_reach, 0, sizeof ra_reach);
    ra_reserved = reserved < capacity ? reserved : capacity;
    ra_mean = mean ? mean : 1;
    /* The header's and the reserved entries' pages (the first zone's, 16
     * KiB, where the kernel can reserve later zones as sampling reaches
     * them: reserve_to) are in the file (fallocate): mapping them now
     * costs no memory and takes the page faults (one per 16 entries) out
     * of the samples. Where the whole table was reserved, the kernel is
     * one before 5.14, which says EINVAL here: its zones fault in a page
     * at a time as their samples land. */
    (void)madvise(region, RIP_ALLOC_HEADER_SIZE + ra_reserved * RIP_ALLOC_ENTRY_SIZE,
                  MADV_POPULATE_WRITE);
    /* Counts of another table (a forked child's parent's) go; the marks
     * of bootstrap blocks stay. A bucket line that is all zero (every one
     * of a process's first table, bar the marks) is only read: its page
     * stays unmapped. */
    for (unsigned i = 0; i < RIP_ALLOC_NEAR_BUCKETS; i++) {
        if (rip_alloc_near[i] != 255)
            rip_alloc_near[i] = 0;
        struct rip_alloc_bucket *b = &rip_alloc_buckets[i];
        uint64_t line[sizeof *b / 8], any = 0;
        memcpy(line, b, sizeof line);
        for (unsigned k = 0; k < sizeof line / 8; k++)
            any |= line[k];
        if (any == 0 && ra_mean != 1)
            continue;
        if (ra_mean == 1)
            /* Every call sampled: nearly every bucket holds several
             * samples, and the word would cost a compare-and-swap more at
             * each sample and each free for no answer; saturated, it is
             * read and left alone, and the frees go to the third look. */
            b->owner = RIP_ALLOC_OWNER_COUNT;
        else if ((b->owner & RIP_ALLOC_OWNER_COUNT) != RIP_ALLOC_OWNER_COUNT)
            b->owner = 0;
        for (unsigned j = 0; j < RIP_ALLOC_SUB_BUCKETS; j++)
            if (b->sub[j] != 255)
                b->sub[j] = 0;
    }
    __atomic_fetch_add(&ra_generation, 1, __ATOMIC_RELEASE);
    /* The calling thread draws afresh on its next allocation; others do
     * once their countdown runs out (within OFF_AHEAD bytes). */
    rip_alloc_past = 0;
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
    ra_gen = 0;
    rip_alloc_past = 0;
}
