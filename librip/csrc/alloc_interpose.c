/*
 * The malloc family, interposed (built with librip's `sampler` feature,
 * which the C libraries and LD_PRELOAD use): each call goes to the next
 * definition (the C library's, or another allocator preloaded after
 * librip), and the sampler notes what it returned. Nothing changes in how
 * memory is allocated: no header, no padding, so malloc_usable_size and
 * every allocator's own checks see the blocks they handed out.
 *
 * Sampling starts only when the environment asks for it (RIP_ALLOC_SAMPLE,
 * read by the constructor): linking librip never changes allocation
 * behaviour silently. Sampling or not, a call that is not sampled costs
 * four instructions more than the C library's (malloc: the countdown's
 * add into thread-local storage, its branch, and the jump on), a free six
 * (the first look, alloc.h).
 *
 * The real functions are found with dlsym(RTLD_NEXT), which may itself
 * call calloc or malloc: those calls are served from a static buffer that
 * is never freed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

struct real {
    void *(*malloc)(size_t);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void (*free)(void *);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
    size_t (*usable)(void *);
};

/* Until resolve() has found them, `real` holds the *_early functions
 * below, which find them first: the common paths call through `real`
 * without asking whether it is too early. */
static void *malloc_early(size_t);
static void *calloc_early(size_t, size_t);
static void *realloc_early(void *, size_t);
static void free_early(void *);
static int posix_memalign_early(void **, size_t, size_t);
static void *aligned_alloc_early(size_t, size_t);
static void *memalign_early(size_t, size_t);
static void *valloc_early(size_t);
static void *pvalloc_early(size_t);

static struct real real = {
    .malloc = malloc_early,
    .calloc = calloc_early,
    .realloc = realloc_early,
    .free = free_early,
    .posix_memalign = posix_memalign_early,
    .aligned_alloc = aligned_alloc_early,
    .memalign = memalign_early,
    .valloc = valloc_early,
    .pvalloc = pvalloc_early,
    .usable = 0,
};
static int resolved;
static int resolving;

/* What dlsym allocates while the real functions are being found. */
static char bootstrap[16384] __attribute__((aligned(64)));
static size_t bootstrap_used;

static inline int in_bootstrap(const void *p)
{
    /* One comparison: below the buffer wraps to a large difference. */
    return (uintptr_t)p - (uintptr_t)bootstrap < sizeof bootstrap;
}

static void *bootstrap_alloc(size_t size, size_t align)
{
    if (align < 16)
        align = 16;
    size_t at = __atomic_load_n(&bootstrap_used, __ATOMIC_RELAXED);
    size_t start, end;
    do {
        start = (at + align - 1) & ~(align - 1);
        end = start + size;
        if (end > sizeof bootstrap || end < start)
            return 0;
    } while (!__atomic_compare_exchange_n(&bootstrap_used, &at, end, 1, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    /* free and realloc of it go past both looks, to in_bootstrap. */
    rip_alloc_mark_forever(bootstrap + start);
    /* Static storage is zeroed: calloc's contract holds. */
    return bootstrap + start;
}

static void resolve(void)
{
    if (__atomic_load_n(&resolved, __ATOMIC_ACQUIRE))
        return;
    resolving = 1;
    struct real r;
    r.malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    r.calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    r.realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
    r.free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    r.posix_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
    r.aligned_alloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
    r.memalign = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "memalign");
    r.valloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "valloc");
    r.pvalloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "pvalloc");
    r.usable = (size_t(*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
    real = r;
    resolving = 0;
    __atomic_store_n(&resolved, 1, __ATOMIC_RELEASE);
}

/* Before the first call has found the real functions: finds them, or
 * says 0 while they are being found (dlsym's own calls go to the bootstrap
 * buffer). */
static __attribute__((noinline, cold)) int resolve_now(void)
{
    if (resolving)
        return 0;
    resolve();
    return 1;
}

/* The caller of the interposed function: where the recorded stack starts. */
#define CALLER ((uintptr_t)__builtin_return_address(0))

/* The sampler's view of every call is the countdown alone
 * (rip_alloc_countdown), taken before the real call: it depends only on
 * the size asked for. So the call that is not sampled is a tail call to
 * the real function, and everything else (the first calls, a crossed
 * countdown) is a tail call to an out-of-line function: no frame of ours,
 * no register saved on the common path. */
/* Records `p` (a sampled allocation) with the stack from the function it
 * is inlined into (the interposed function's slow path, which the common
 * path reached by a tail call: its caller is the program). */
static inline __attribute__((always_inline)) void *noted(void *p, size_t requested,
                                                         uintptr_t caller)
{
    if (p != 0) {
        rip_alloc_prefetch(p);
        struct rip_alloc_regs here;
        RIP_ALLOC_HERE(here);
        rip_alloc_busy = 1;
        size_t size = real.usable ? real.usable(p) : requested;
        rip_alloc_busy = 0;
        rip_alloc_record_at(&here, p, requested, size, caller, 0);
    }
    return p;
}

/* `name`'s paths off the common one: before the real functions are known
 * (`fallback` while they are being found), and past the countdown, where
 * the sampler decides (a failed allocation draws the next distance and
 * records nothing: a sample lost, never a false one). `args` are the
 * call's arguments, `size` the bytes asked for. */
#define SLOW_PATHS(type, name, params, args, size, fallback)                                       \
    static __attribute__((noinline, cold)) type name##_past(params, uintptr_t caller)              \
    {                                                                                              \
        if (!rip_alloc_should_sample_slow(size))                                                   \
            return real.name args;                                                                 \
        return noted(real.name args, size, caller);                                                \
    }                                                                                              \
    static __attribute__((noinline, cold)) type name##_early(params)                               \
    {                                                                                              \
        if (!resolve_now())                                                                        \
            return fallback;                                                                       \
        return real.name args;                                                                     \
    }

/* The common path of `name`: the real function (or, too early, its
 * *_early stand-in) unless the countdown crossed. */
#define COMMON_PATH(name, args, size, caller_args)                                                 \
    do {                                                                                           \
        if (__builtin_expect(!rip_alloc_countdown(size), 1))                                       \
            return real.name args;                                                                 \
        return name##_past caller_args;                                                            \
    } while (0)

#define P1(t1, a1) t1 a1
#define P2(t1, a1, t2, a2) t1 a1, t2 a2

SLOW_PATHS(void *, malloc, P1(size_t, size), (size), size, bootstrap_alloc(size, 16))

__attribute__((visibility("default"))) void *malloc(size_t size)
{
    COMMON_PATH(malloc, (size), size, (size, CALLER));
}

/* calloc's bytes: SIZE_MAX when n * size overflows (the real calloc fails). */
static inline size_t calloc_total(size_t n, size_t size)
{
    size_t total;
    return __builtin_mul_overflow(n, size, &total) ? SIZE_MAX : total;
}

SLOW_PATHS(void *, calloc, P2(size_t, n, size_t, size), (n, size), calloc_total(n, size),
           calloc_total(n, size) == SIZE_MAX ? 0 : bootstrap_alloc(n * size, 16))

/* The countdown counts the product as it wraps: when it overflows, the
 * real calloc fails, and a sample drawn for it is lost, never false. */
__attribute__((visibility("default"))) void *calloc(size_t n, size_t size)
{
    COMMON_PATH(calloc, (n, size), n * size, (n, size, CALLER));
}

/* free of an address both looks let through: a sampled block (or a
 * bootstrap one, or one whose buckets it shares with a sampled one). */
static __attribute__((noinline, cold)) void free_sampled(void *p)
{
    if (in_bootstrap(p))
        return;
    rip_alloc_forget_looked(p);
    real.free(p);
}

/* free before the real functions are known. */
static __attribute__((noinline, cold)) void free_early(void *p)
{
    if (p == 0 || !resolve_now())
        return;
    real.free(p);
}

/* An address the first look lets through nearly always shares its
 * bucket with a live sample and no more: the second look, a few
 * instructions in the cold part of this function, lets it go on to the
 * real free. */
__attribute__((visibility("default"))) void free(void *p)
{
    if (__builtin_expect(rip_alloc_maybe_sampled(p), 0) &&
        __builtin_expect(rip_alloc_sampled_in_bucket(p), 0))
        return free_sampled(p);
    real.free(p);
}

/* realloc of a block from the bootstrap buffer: a copy (it is never freed). */
static __attribute__((noinline, cold)) void *bootstrap_realloc(void *p, size_t size)
{
    void *q = malloc(size);
    if (q) {
        size_t room = (size_t)(bootstrap + sizeof bootstrap - (char *)p);
        memcpy(q, p, size < room ? size : room);
    }
    return q;
}

SLOW_PATHS(void *, realloc, P2(void *, p, size_t, size), (p, size), size,
           bootstrap_alloc(size, 16))

/* realloc whose old block may be sampled: forgotten first, since once the
 * real realloc returns another thread may be given the old address and
 * sample it. A failed realloc leaves the old block unsampled (a sample
 * lost, never a false one). */
static __attribute__((noinline, cold)) void *realloc_forgetting(void *p, size_t size,
                                                                 uintptr_t caller)
{
    if (in_bootstrap(p))
        return bootstrap_realloc(p, size);
    rip_alloc_forget_looked(p);
    if (!rip_alloc_countdown(size))
        return real.realloc(p, size);
    return realloc_past(p, size, caller);
}

/* realloc(p, 0) frees: its countdown adds nothing, so it never reaches a
 * sample point unless the one before did (then realloc_past forwards it
 * and records nothing, since it returns null). */
__attribute__((visibility("default"))) void *realloc(void *p, size_t size)
{
    if (__builtin_expect(rip_alloc_maybe_sampled(p), 0) &&
        __builtin_expect(rip_alloc_sampled_in_bucket(p), 0))
        return realloc_forgetting(p, size, CALLER);
    if (__builtin_expect(!rip_alloc_countdown(size), 1))
        return real.realloc(p, size);
    return realloc_past(p, size, CALLER);
}

static __attribute__((noinline, cold)) int posix_memalign_early(void **out, size_t align,
                                                                 size_t size)
{
    if (!resolve_now())
        return (*out = bootstrap_alloc(size, align)) ? 0 : ENOMEM;
    return real.posix_memalign(out, align, size);
}

static __attribute__((noinline, cold)) int posix_memalign_past(void **out, size_t align,
                                                                size_t size, uintptr_t caller)
{
    int r = real.posix_memalign(out, align, size);
    if (rip_alloc_should_sample_slow(size) && r == 0)
        noted(*out, size, caller);
    return r;
}

__attribute__((visibility("default"))) int posix_memalign(void **out, size_t align, size_t size)
{
    if (__builtin_expect(!rip_alloc_countdown(size), 1))
        return real.posix_memalign(out, align, size);
    return posix_memalign_past(out, align, size, CALLER);
}

SLOW_PATHS(void *, aligned_alloc, P2(size_t, align, size_t, size), (align, size), size,
           bootstrap_alloc(size, align))

__attribute__((visibility("default"))) void *aligned_alloc(size_t align, size_t size)
{
    COMMON_PATH(aligned_alloc, (align, size), size, (align, size, CALLER));
}

SLOW_PATHS(void *, memalign, P2(size_t, align, size_t, size), (align, size), size,
           bootstrap_alloc(size, align))

__attribute__((visibility("default"))) void *memalign(size_t align, size_t size)
{
    COMMON_PATH(memalign, (align, size), size, (align, size, CALLER));
}

SLOW_PATHS(void *, valloc, P1(size_t, size), (size), size, bootstrap_alloc(size, 4096))

__attribute__((visibility("default"))) void *valloc(size_t size)
{
    COMMON_PATH(valloc, (size), size, (size, CALLER));
}

SLOW_PATHS(void *, pvalloc, P1(size_t, size), (size), size,
           bootstrap_alloc((size + 4095) & ~(size_t)4095, 4096))

__attribute__((visibility("default"))) void *pvalloc(size_t size)
{
    COMMON_PATH(pvalloc, (size), size, (size, CALLER));
}

__attribute__((visibility("default"))) size_t malloc_usable_size(void *p)
{
    if (p == 0)
        return 0;
    if (in_bootstrap(p))
        return (size_t)(bootstrap + sizeof bootstrap - (char *)p);
    if (__builtin_expect(!resolved, 0))
        resolve();
    return real.usable ? real.usable(p) : 0;
}

/* Creates the ring with its allocation table when RIP_ALLOC_SAMPLE asks
 * for it (Rust: writer::alloc). */
extern void rip_alloc_start_from_env(void);

__attribute__((constructor)) static void rip_alloc_init(void)
{
    resolve();
    rip_alloc_start_from_env();
}
