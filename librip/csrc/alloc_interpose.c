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
 * behaviour silently. Without it every call is one predictable branch
 * more than the C library's.
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

static struct real real;
static int resolved;
static int resolving;

/* What dlsym allocates while the real functions are being found. */
static char bootstrap[16384] __attribute__((aligned(64)));
static size_t bootstrap_used;

static int in_bootstrap(const void *p)
{
    return (const char *)p >= bootstrap && (const char *)p < bootstrap + sizeof bootstrap;
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

/* Calls made while resolving go to the bootstrap buffer. */
#define RESOLVE_OR(fallback)                                                                       \
    do {                                                                                           \
        if (__builtin_expect(!resolved, 0)) {                                                      \
            if (resolving)                                                                         \
                return fallback;                                                                   \
            resolve();                                                                             \
        }                                                                                          \
    } while (0)

/* The sampler's view: one countdown per call, the rest only for samples.
 * Inlined, so that __builtin_return_address(0) is the interposed
 * function's: the allocator's caller, where the recorded stack starts. */
#define note(p, requested) note_from((p), (requested), (uintptr_t)__builtin_return_address(0))

static inline __attribute__((always_inline)) void *note_from(void *p, size_t requested,
                                                              uintptr_t caller)
{
    if (__builtin_expect(rip_alloc_sample_now(requested), 0) && p != 0) {
        rip_alloc_busy = 1;
        size_t size = real.usable ? real.usable(p) : requested;
        rip_alloc_busy = 0;
        rip_alloc_record(p, requested, size, caller, 1);
    }
    return p;
}

__attribute__((visibility("default"))) void *malloc(size_t size)
{
    RESOLVE_OR(bootstrap_alloc(size, 16));
    return note(real.malloc(size), size);
}

__attribute__((visibility("default"))) void *calloc(size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total))
        total = SIZE_MAX;
    RESOLVE_OR(total == SIZE_MAX ? 0 : bootstrap_alloc(total, 16));
    return note(real.calloc(n, size), total);
}

__attribute__((visibility("default"))) void free(void *p)
{
    if (__builtin_expect(rip_alloc_maybe_sampled(p), 0))
        rip_alloc_forget(p);
    if (__builtin_expect(!resolved || in_bootstrap(p), 0)) {
        if (p == 0 || in_bootstrap(p))
            return;
        resolve();
    }
    real.free(p);
}

__attribute__((visibility("default"))) void *realloc(void *p, size_t size)
{
    if (in_bootstrap(p)) {
        void *q = malloc(size);
        if (q) {
            size_t room = (size_t)(bootstrap + sizeof bootstrap - (char *)p);
            memcpy(q, p, size < room ? size : room);
        }
        return q;
    }
    RESOLVE_OR(bootstrap_alloc(size, 16));
    /* Forgotten first: once the real realloc returns, another thread may
     * be given the old address and sample it. A failed realloc leaves the
     * old block unsampled (a sample lost, never a false one). */
    if (rip_alloc_maybe_sampled(p))
        rip_alloc_forget(p);
    void *q = real.realloc(p, size);
    return size ? note(q, size) : q;
}

__attribute__((visibility("default"))) int posix_memalign(void **out, size_t align, size_t size)
{
    RESOLVE_OR((*out = bootstrap_alloc(size, align)) ? 0 : ENOMEM);
    int r = real.posix_memalign(out, align, size);
    if (r == 0)
        note(*out, size);
    return r;
}

__attribute__((visibility("default"))) void *aligned_alloc(size_t align, size_t size)
{
    RESOLVE_OR(bootstrap_alloc(size, align));
    return note(real.aligned_alloc(align, size), size);
}

__attribute__((visibility("default"))) void *memalign(size_t align, size_t size)
{
    RESOLVE_OR(bootstrap_alloc(size, align));
    return note(real.memalign(align, size), size);
}

__attribute__((visibility("default"))) void *valloc(size_t size)
{
    RESOLVE_OR(bootstrap_alloc(size, 4096));
    return note(real.valloc(size), size);
}

__attribute__((visibility("default"))) void *pvalloc(size_t size)
{
    RESOLVE_OR(bootstrap_alloc((size + 4095) & ~(size_t)4095, 4096));
    return note(real.pvalloc(size), size);
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
