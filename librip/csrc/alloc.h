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
/* Entries an address may be placed in, from its hash on. */
#define RIP_ALLOC_PROBE 32

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

/* Whether an allocation of `size` bytes is to be sampled (counts it). */
int rip_alloc_should_sample(size_t size);
/* Records a sampled allocation with the stack from `caller` (the return
 * address of the interposed function) outwards; where `caller` is 0 or not
 * found, `skip` frames above rip_alloc_record are left out. */
void rip_alloc_record(void *ptr, size_t requested, size_t size, uintptr_t caller, unsigned skip);
/* Removes `ptr` from the table if it was sampled (before the real free). */
void rip_alloc_forget(void *ptr);
/* Points the sampler at a table (null: off). */
void rip_alloc_configure(uint64_t *region, uint64_t capacity, uint64_t mean);

#endif
