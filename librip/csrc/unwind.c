/*
 * The allocation sampler's stack walk: by the same DWARF call-frame
 * information libgcc's _Unwind_Backtrace interprets, so the same stacks,
 * with each address's rule cached after its first walk.
 *
 * libgcc interprets every frame from scratch: it finds the FDE (a lock,
 * dl_iterate_phdr, a binary search), parses its CIE, and runs both
 * programs up to the address, about 2,400 instructions a frame here. What
 * a frame needs to be stepped over on x86-64 is small and fixed per
 * address (cfi.c, unwind.h), so it is kept per address in a table that
 * only grows, and a walk costs a hash lookup and two or three loads a
 * frame once its addresses have been seen.
 *
 * Anything a rule cannot say (a CFA that is an expression, as in a
 * signal frame; rbp or the return address kept in a register; an unknown
 * opcode) makes rip_alloc_unwind return -1, and the caller walks the
 * stack with libgcc instead: never a different stack.
 *
 * Code may be unloaded (dlclose, or glibc's own unloading of iconv
 * modules) and other code loaded at its addresses. A rule of code that
 * can never be unloaded is kept as it is: the executable, the libraries
 * it names (DT_NEEDED, loaded before it started), the dynamic loader and
 * the module holding this code. Any other rule carries the number of
 * unloads when it was made (dl_iterate_phdr's dlpi_subs), and a walk that
 * meets one reads that number, once, to check it: a rule never outlives
 * its module, and a walk through permanent code only takes no lock.
 *
 * Everything here may run inside malloc: no allocation, no lock of ours
 * (_Unwind_Find_FDE and dl_iterate_phdr take the loader's, as libgcc's
 * walk does).
 */
#define _GNU_SOURCE
#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "alloc.h"
#include "unwind.h"

#if defined(__x86_64__)

/* A cached rule. `key` is 0 (free), or the address with KEY_PERMANENT
 * when its code can never be unloaded (then `subs` is unused), and
 * KEY_BUSY while its claimer writes the rest. A slot is written once. */
struct slot {
    uint64_t key;
    uint64_t subs;
    struct rip_cfi_rule rule;
};
#define KEY_PERMANENT (1ULL << 62)
#define KEY_BUSY (1ULL << 63)

/* Open addressing by the address, CACHE_PROBE slots probed; never
 * evicted (a full window leaves its address uncached: interpreted on
 * every walk). 192 KiB of zeroed memory, touched as it fills. */
#define CACHE_SLOTS 8192
#define CACHE_PROBE 8
static struct slot cache[CACHE_SLOTS];

static unsigned cache_index(uint64_t pc)
{
    return (unsigned)((pc * 0x9e3779b97f4a7c15ULL) >> 51) & (CACHE_SLOTS - 1);
}

/* The slots of the first frames of the calling thread's last walk. Each
 * frame's slot is known only once the frame before it is stepped over, so
 * a walk waits for its slots' lines one after the other; a thread's
 * samples mostly come from the same few places, and loading these lines
 * while the sampled allocation is being made takes those waits out of the
 * walk (rip_alloc_unwind_warm). */
#define WARM_FRAMES 8
static __thread uint16_t warm_slots[WARM_FRAMES] __attribute__((tls_model("initial-exec")));
_Static_assert(CACHE_SLOTS <= 65536, "a slot's index fits in warm_slots");

/* The address ranges of the code that can never be unloaded, found once
 * (the first walk). */
#define MAX_PERMANENT 64
static struct {
    uint64_t start, end;
} permanent[MAX_PERMANENT];
static unsigned permanent_count;
/* 0: not looked for yet; 1: being looked for; 2: found. */
static int permanent_state;

/* The executable's DT_NEEDED names, while the modules are looked at. */
struct needed {
    const char *names[64];
    unsigned count;
    int seen_executable;
};

/* A dynamic-section pointer: glibc relocates them in place in most
 * modules, not in all (the loader's own, the vDSO). */
static const char *dyn_ptr(const struct dl_phdr_info *info, uint64_t v)
{
    return (const char *)(uintptr_t)(v < info->dlpi_addr ? v + info->dlpi_addr : v);
}

static const ElfW(Dyn) *dynamic_of(const struct dl_phdr_info *info)
{
    for (unsigned i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            return (const ElfW(Dyn) *)(uintptr_t)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    return 0;
}

/* A module's own name (DT_SONAME), else its path's last part. */
static const char *soname_of(const struct dl_phdr_info *info)
{
    const ElfW(Dyn) *d = dynamic_of(info);
    uint64_t strtab = 0, soname = UINT64_MAX;
    for (; d && d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_STRTAB)
            strtab = d->d_un.d_ptr;
        else if (d->d_tag == DT_SONAME)
            soname = d->d_un.d_val;
    }
    if (strtab != 0 && soname != UINT64_MAX)
        return dyn_ptr(info, strtab) + soname;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    const char *slash = strrchr(name, '/');
    return slash ? slash + 1 : name;
}

static int contains(const struct dl_phdr_info *info, const void *addr)
{
    uint64_t a = (uint64_t)(uintptr_t)addr;
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uint64_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && a - start < ph->p_memsz)
            return 1;
    }
    return 0;
}

static int note_permanent(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct needed *needed = arg;
    int keep = 0;
    if (!needed->seen_executable) {
        /* The executable comes first: note what it needs. */
        needed->seen_executable = 1;
        const ElfW(Dyn) *d = dynamic_of(info);
        uint64_t strtab = 0;
        for (const ElfW(Dyn) *e = d; e && e->d_tag != DT_NULL; e++)
            if (e->d_tag == DT_STRTAB)
                strtab = e->d_un.d_ptr;
        for (const ElfW(Dyn) *e = d; strtab && e && e->d_tag != DT_NULL; e++)
            if (e->d_tag == DT_NEEDED && needed->count < 64)
                needed->names[needed->count++] = dyn_ptr(info, strtab) + e->d_un.d_val;
        keep = 1;
    } else if (contains(info, &_r_debug) || contains(info, (const void *)&rip_alloc_unwind)) {
        keep = 1;
    } else {
        const char *name = soname_of(info);
        for (unsigned i = 0; i < needed->count && !keep; i++)
            keep = strcmp(name, needed->names[i]) == 0;
    }
    if (!keep || permanent_count == MAX_PERMANENT)
        return 0;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uint64_t start = info->dlpi_addr + ph->p_vaddr;
        if (start < lo)
            lo = start;
        if (start + ph->p_memsz > hi)
            hi = start + ph->p_memsz;
    }
    if (lo < hi) {
        permanent[permanent_count].start = lo;
        permanent[permanent_count].end = hi;
        permanent_count++;
    }
    return 0;
}

/* Whether the code at `pc` can never be unloaded. Until the ranges are
 * found (by the first thread to ask; others meanwhile say no), nothing is
 * called permanent. */
static int is_permanent(uint64_t pc)
{
    int state = __atomic_load_n(&permanent_state, __ATOMIC_ACQUIRE);
    if (state == 0) {
        int expected = 0;
        if (__atomic_compare_exchange_n(&permanent_state, &expected, 1, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED)) {
            struct needed needed = {.count = 0, .seen_executable = 0};
            dl_iterate_phdr(note_permanent, &needed);
            __atomic_store_n(&permanent_state, 2, __ATOMIC_RELEASE);
            state = 2;
        }
    }
    if (state != 2)
        return 0;
    for (unsigned i = 0; i < permanent_count; i++)
        if (pc - permanent[i].start < permanent[i].end - permanent[i].start)
            return 1;
    return 0;
}

static int read_subs(struct dl_phdr_info *info, size_t size, void *arg)
{
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs)
        *(uint64_t *)arg = (uint64_t)info->dlpi_subs;
    return 1;
}

/* The unloads so far, read at most once per walk. */
struct epoch {
    int known;
    uint64_t subs;
};

static uint64_t subs_now(struct epoch *e)
{
    if (!e->known) {
        e->subs = 0;
        dl_iterate_phdr(read_subs, &e->subs);
        e->known = 1;
    }
    return e->subs;
}

/* The rule of `pc` when the first slot of its window is not its permanent
 * one: another slot of the window, or `scratch` filled from the CFI (and
 * cached in the window's first free slot, if any); null when the CFI says
 * what a rule cannot. `*end` is set when there is no FDE (the end of what
 * CFI can walk, as for libgcc). */
static __attribute__((noinline)) const struct rip_cfi_rule *
rule_slow(uint64_t pc, struct epoch *epoch, struct rip_cfi_rule *scratch, int *end)
{
    unsigned at = cache_index(pc);
    unsigned i;
    for (i = 0; i < CACHE_PROBE; i++) {
        struct slot *s = &cache[(at + i) & (CACHE_SLOTS - 1)];
        uint64_t k = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);
        if (k == (pc | KEY_PERMANENT) || (k == pc && s->subs == subs_now(epoch)))
            return &s->rule;
        if (k == 0)
            break;
    }
    int found = rip_cfi_rule(pc, scratch);
    if (found < 0)
        *end = 1;
    if (found != 1)
        return 0;
    if (pc >= KEY_PERMANENT)
        return scratch;
    uint64_t key = pc;
    uint64_t subs = 0;
    if (is_permanent(pc))
        key |= KEY_PERMANENT;
    else
        subs = subs_now(epoch);
    /* Another thread may have cached the same address meanwhile: a
     * duplicate is harmless. */
    for (; i < CACHE_PROBE; i++) {
        struct slot *s = &cache[(at + i) & (CACHE_SLOTS - 1)];
        uint64_t k = 0;
        if (__atomic_compare_exchange_n(&s->key, &k, key | KEY_BUSY, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_ACQUIRE)) {
            s->subs = subs;
            s->rule = *scratch;
            __atomic_store_n(&s->key, key, __ATOMIC_RELEASE);
            break;
        }
        if (k == key && ((key & KEY_PERMANENT) || s->subs == subs))
            break;
    }
    return scratch;
}

int rip_alloc_unwind(const struct rip_alloc_regs *from, uint64_t *out, unsigned max)
{
    uint64_t pc = from->ip, sp = from->sp, bp = from->bp;
    struct epoch epoch = {.known = 0};
    /* Set once a frame said its caller's rbp is undefined (until one
     * restores it). */
    unsigned bp_lost = 0;
    unsigned n = 0;
    struct rip_cfi_rule scratch;
    for (;;) {
        /* The first slot of the address's window holds it nearly always. */
        unsigned at = cache_index(pc);
        if (n < WARM_FRAMES)
            warm_slots[n] = (uint16_t)at;
        const struct slot *s = &cache[at];
        const struct rip_cfi_rule *r = &s->rule;
        if (__builtin_expect(__atomic_load_n(&s->key, __ATOMIC_ACQUIRE) != (pc | KEY_PERMANENT),
                             0)) {
            int end = 0;
            r = rule_slow(pc, &epoch, &scratch, &end);
            if (end)
                return (int)n;
            if (r == 0)
                return -1;
        }
        unsigned flags = r->flags;
        uint64_t cfa = sp + (uint64_t)(int64_t)r->cfa_off;
        if (__builtin_expect(flags & ~RIP_CFI_BP_SAVED, 0)) {
            if (flags & RIP_CFI_END)
                return (int)n;
            if (flags & RIP_CFI_CFA_RBP) {
                /* A CFA from an rbp no rule has said: libgcc's to walk. */
                if (bp_lost)
                    return -1;
                cfa = bp + (uint64_t)(int64_t)r->cfa_off;
            }
            if (flags & RIP_CFI_BP_UNDEFINED)
                bp_lost = 1;
        }
        /* The stack grows down: a caller's frame lies above. Anything else
         * is a rule this walk misread. */
        if (__builtin_expect(cfa - sp - 1 >= (1u << 24), 0))
            return -1;
        if (flags & RIP_CFI_BP_SAVED) {
            bp = *(const uint64_t *)(uintptr_t)(cfa + (uint64_t)(int64_t)r->bp_off);
            bp_lost = 0;
        }
        uint64_t ip = *(const uint64_t *)(uintptr_t)(cfa - 8);
        sp = cfa;
        if (ip == 0)
            return (int)n;
        out[n++] = ip;
        if (n == max)
            return (int)n;
        pc = ip - 1;
    }
}

void rip_alloc_unwind_warm(void)
{
    /* The key's line and the rule's (a 24-byte slot may end in the next
     * line). */
    for (unsigned i = 0; i < WARM_FRAMES; i++) {
        const struct slot *s = &cache[warm_slots[i]];
        __builtin_prefetch(&s->key, 0, 3);
        __builtin_prefetch(&s->rule, 0, 3);
    }
}

#else

void rip_alloc_unwind_warm(void) {}

int rip_alloc_unwind(const struct rip_alloc_regs *from, uint64_t *out, unsigned max)
{
    (void)from;
    (void)out;
    (void)max;
    return -1;
}

#endif
