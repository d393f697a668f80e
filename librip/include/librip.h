/*
 * librip: instruction-pointer snapshots of every thread and coroutine in a
 * shared-memory ring file on tmpfs, readable live or after a crash.
 *
 * The original API (rip_create_ring, rip_init, rip_exit, rip_snap) keeps its
 * names and meanings; the ring file format is specified in docs/FORMAT.md.
 *
 * Link with the static library (librip.a plus -lpthread -ldl -lm) or the
 * shared library (-lrip). Only Linux on x86-64 is supported.
 */
#ifndef LIBRIP_H
#define LIBRIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * The original header-only librip defined thread_local for C before C23
 * (its users write `thread_local pid_t rip_tid;`). Spelled as glibc's
 * <threads.h> spells it, so including both is not a redefinition.
 */
#if !defined(__cplusplus) && !defined(thread_local) && \
    (!defined(__STDC_VERSION__) || __STDC_VERSION__ < 202311L)
#define thread_local _Thread_local
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The globals the original librip asked its users to define. Programs
 * written for it still define them (and compile and link unchanged); this
 * librip keeps its state elsewhere and never reads them, and a new program
 * need not define them.
 */
struct rip_ring;
extern thread_local pid_t rip_tid;
extern thread_local uint8_t rip_idx;
extern thread_local uint8_t rip_ctr;
extern struct rip_ring *rip_ring;

/* Ring depth (snaps kept per slot) when none is given. */
#define RIP_DEFAULT_DEPTH 32u
/* Largest depth a ring may have (a power of two). */
#define RIP_MAX_DEPTH 4096u
/* Coroutine slots of a ring made by rip_create_ring. */
#define RIP_DEFAULT_COROUTINE_SLOTS 65536u

/* Options for rip_create_ring_ex. thread_slots 0 means the system's pid_max. */
typedef struct rip_options {
    uint32_t thread_slots;
    uint32_t coroutine_slots;
    uint32_t depth; /* a power of two, 1..RIP_MAX_DEPTH; 0 means RIP_DEFAULT_DEPTH */
} rip_options_t;

/* Where the calling thread's snaps go; saved and restored by schedulers. */
typedef struct rip_cursor {
    uint64_t *seq;  /* the target slot's sequence word */
    uint64_t epoch; /* which ring it belongs to: stale cursors fall back to the sink */
} rip_cursor_t;

/* A coroutine's slot, from rip_coro_begin. Invalid after rip_coro_exit. */
typedef struct rip_coro {
    uint64_t id;
    uint32_t index;
    uint32_t generation;
    uint64_t epoch;
} rip_coro_t;

/*
 * Creates the process's ring at `file` ("%p" expands to the pid; NULL means
 * /dev/shm/rip-<uid>/<comm>.<pid>.ring) with `max_procs` thread slots (0 =
 * pid_max), depth RIP_DEFAULT_DEPTH and RIP_DEFAULT_COROUTINE_SLOTS
 * coroutine slots. An existing file is never replaced. On failure it prints
 * the reason once to stderr and returns false; the program runs on untraced.
 */
bool rip_create_ring(const char *file, uint32_t max_procs);
/* rip_create_ring with explicit options (NULL means the defaults). */
bool rip_create_ring_ex(const char *file, const rip_options_t *options);

/*
 * id 0: registers the calling thread (its tid) under `name` and makes its
 * slot the thread's snap target (again, if it was registered before).
 * id != 0: makes coroutine `id`'s slot the calling thread's snap target,
 * taking and naming a slot on first use. A freshly taken slot starts at
 * sequence number ctr * 256 + idx when idx or ctr is non-zero (the position
 * a scheduler saved with the original API); an existing slot keeps its own.
 * Failures (no ring, slots full, tmpfs full) leave the snaps in the sink.
 */
void rip_init(uint32_t id, const char *name, size_t namelen, uint8_t idx, uint8_t ctr);
/*
 * Marks the current snap target exited. A coroutine's slot is freed for
 * reuse and the thread returns to its own slot (or the sink); a thread's
 * slot is kept for post-mortem reading and the thread's snaps go to the sink.
 */
void rip_exit(void);
/*
 * The out-of-line snap, for function pointers and programs built against
 * an older librip.h: records (and returns) its caller's address, the
 * return address minus one. `rip_snap()` written in a program is the
 * inline snap below (a function-like macro); the parentheses here keep
 * the macro from expanding in this declaration.
 */
uintptr_t(rip_snap)(void);

/* The calling thread's current snap target. */
rip_cursor_t rip_cursor_save(void);
/* Makes `cursor` the calling thread's snap target (the sink if it is stale). */
void rip_cursor_restore(rip_cursor_t cursor);

/*
 * Takes a coroutine slot for `id` (0 = the next unused id) named `name`.
 * Returns false when there is no ring or every coroutine slot is taken.
 */
bool rip_coro_begin(uint64_t id, const char *name, size_t namelen, rip_coro_t *out);
/* Makes the coroutine the calling thread's snap target; returns the previous target. */
rip_cursor_t rip_coro_switch(rip_coro_t coro);
/* Task statistics: a poll starts on the calling thread / ends. */
void rip_coro_poll_begin(rip_coro_t coro);
void rip_coro_poll_end(rip_coro_t coro);
/* Marks the coroutine exited and frees its slot for reuse. */
void rip_coro_exit(rip_coro_t coro);

/* Snaps taken by threads that had no slot (a lower bound: see FORMAT.md). */
uint64_t rip_dropped_snaps(void);

/* Internals read by rip_snap_inline: the ring's depth - 1, and the cursor. */
extern uint64_t rip_mask;
extern __thread uint64_t *rip_cursor __attribute__((tls_model("initial-exec")));

/*
 * The site table (docs/FORMAT.md, "The site table"): each snap also emits,
 * as data beside its code, a record of its address (label 1 in the asm below), file,
 * line, function and label into the section rip_sites, so that rip-probe
 * names it exactly in a build without -g, stripped or not, with LTO or
 * not. No instruction is added. Fields are relative (no dynamic
 * relocation: PIE and shared libraries keep the section read-only).
 * The section is not referenced by code: links with --gc-sections (Rust
 * programs always; C with -Wl,--gc-sections) keep it through the "R" flag
 * (SHF_GNU_RETAIN), used when the compiler knows its assembler has it
 * (__attribute__((retain)) is then supported: GCC 11 with binutils 2.36,
 * clang 13, or later). Older toolchains get "a": the table is kept by
 * links without --gc-sections.
 */
#if defined(__has_attribute)
#if __has_attribute(retain)
#define RIP__SITES_FLAGS "aR"
#endif
#endif
#ifndef RIP__SITES_FLAGS
#define RIP__SITES_FLAGS "a"
#endif
#define RIP__SITE_RECORD                                                                         \
    ".pushsection rip_sites,\"" RIP__SITES_FLAGS "\",@progbits\n\t"                             \
    ".balign 4\n\t"                                                                             \
    ".long 0x53504952\n\t"                                                                      \
    ".long 1b - .\n\t"                                                                          \
    ".long %c[rip__file] - .\n\t"                                                               \
    ".long %c[rip__func] - .\n\t"                                                               \
    ".long %c[rip__lbl] - .\n\t"                                                                \
    ".long %c[rip__line]\n\t"                                                                   \
    ".long 0\n\t"                                                                               \
    ".popsection"
#define RIP__SITE_OPERANDS(rip__label)                                                           \
    [rip__file] "i"(__FILE__), [rip__func] "i"(__func__), [rip__lbl] "i"(rip__label),             \
        [rip__line] "i"(__LINE__)

/*
 * The inline snap: stores (seq << 48 | address of this point) into the
 * target slot's entry seq & rip_mask, then increments seq, and yields
 * that address (as the original rip_snap() returned it). Ten
 * instructions; no call, branch, lock, fence or syscall; the asm pins the
 * sequence. A macro rather than an inline function, so that the recorded
 * address is inside the code of the line that wrote it, whatever the
 * optimizer does around it: no call to turn into a tail jump, nothing to
 * inline or outline differently under LTO.
 *
 * By default the cursor is read with the initial-exec TLS model, which
 * works whether librip is linked statically or as a shared library. A
 * program linked with the static library may define RIP_LINKED_STATICALLY
 * before including this header: the local-exec model then reads the cursor
 * in one instruction, and the spare instruction keeps the increment out of
 * memory (faster on recent x86-64). Defining it and linking the shared
 * library fails at link time (R_X86_64_TPOFF32 against rip_cursor).
 */
#ifdef RIP_LINKED_STATICALLY
#define RIP__SNAP_AT(rip__label)                                                                 \
    (__extension__({                                                                             \
        uint64_t rip__mask = __atomic_load_n(&rip_mask, __ATOMIC_RELAXED);                       \
        uint64_t rip__cur, rip__seq, rip__next, rip__addr;                                       \
        __asm__ volatile("movq %%fs:rip_cursor@tpoff, %[cur]\n\t"                                \
                         "movq (%[cur]), %[seq]\n\t"                                              \
                         "leaq 1(%[seq]), %[next]\n\t"                                            \
                         "andq %[seq], %[mask]\n\t"                                               \
                         "shlq $48, %[seq]\n\t"                                                   \
                         "leaq 0(%%rip), %[addr]\n"                                               \
                         "1:\n\t"                                                                \
                         "orq %[addr], %[seq]\n\t"                                                \
                         "movq %[seq], 8(%[cur],%[mask],8)\n\t"                                   \
                         "movq %[next], (%[cur])\n\t" RIP__SITE_RECORD                              \
                         : [cur] "=&r"(rip__cur), [seq] "=&r"(rip__seq), [next] "=&r"(rip__next), \
                           [addr] "=&r"(rip__addr), [mask] "+r"(rip__mask)                       \
                         : RIP__SITE_OPERANDS(rip__label)                                        \
                         : "memory", "cc");                                                      \
        (uintptr_t) rip__addr;                                                                   \
    }))
#else
#define RIP__SNAP_AT(rip__label)                                                                 \
    (__extension__({                                                                             \
        uint64_t rip__mask = __atomic_load_n(&rip_mask, __ATOMIC_RELAXED);                       \
        uint64_t rip__cur, rip__seq, rip__addr;                                                  \
        __asm__ volatile("movq rip_cursor@gottpoff(%%rip), %[cur]\n\t"                           \
                         "movq %%fs:(%[cur]), %[cur]\n\t"                                         \
                         "movq (%[cur]), %[seq]\n\t"                                              \
                         "andq %[seq], %[mask]\n\t"                                               \
                         "shlq $48, %[seq]\n\t"                                                   \
                         "leaq 0(%%rip), %[addr]\n"                                               \
                         "1:\n\t"                                                                \
                         "orq %[addr], %[seq]\n\t"                                                \
                         "movq %[seq], 8(%[cur],%[mask],8)\n\t"                                   \
                         "incq (%[cur])\n\t" RIP__SITE_RECORD                                      \
                         : [cur] "=&r"(rip__cur), [seq] "=&r"(rip__seq), [addr] "=&r"(rip__addr), \
                           [mask] "+r"(rip__mask)                                                \
                         : RIP__SITE_OPERANDS(rip__label)                                        \
                         : "memory", "cc");                                                      \
        (uintptr_t) rip__addr;                                                                   \
    }))
#endif

/* The inline snap: the address it stored, with its site recorded. */
#define RIP_SNAP_ADDR() RIP__SNAP_AT("")

/* The inline snap as a statement. */
#define RIP_SNAP()                                                                               \
    do {                                                                                         \
        (void)RIP_SNAP_ADDR();                                                                   \
    } while (0)

/*
 * The inline snap with a label, a string literal recorded in the site
 * table (not in the ring: no runtime cost) and shown by rip-probe beside
 * the location: RIP_SNAP_LABEL("waiting for the order book").
 */
#define RIP_SNAP_LABEL(label)                                                                    \
    do {                                                                                         \
        (void)RIP__SNAP_AT("" label);                                                            \
    } while (0)

/*
 * The original name: the inline snap, usable as a statement or for the
 * address it recorded, as the original header-only rip_snap() was.
 */
#define rip_snap() RIP_SNAP_ADDR()

/* The same inline snap under the name of a function call. */
#define rip_snap_inline() RIP_SNAP()

#ifdef __cplusplus
}
#endif

#endif /* LIBRIP_H */
