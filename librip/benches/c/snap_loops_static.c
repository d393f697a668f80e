/*
 * The inline snap as a program linked with the static library compiles it
 * (RIP_LINKED_STATICALLY: local-exec TLS), in the loop of snap_loops.c.
 */
#include <stdint.h>

#define RIP_LINKED_STATICALLY
#include "librip.h"

void rip_loop_c_inline_static(uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        RIP_SNAP();
        __asm__ volatile("" : : "r"(i));
    }
}
