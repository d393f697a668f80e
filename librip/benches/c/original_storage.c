/* Storage the original librip header asked its consumers to define. */
#include <stdint.h>
#include <sys/types.h>

struct orig_ring;

__thread pid_t orig_rip_tid;
__thread uint8_t orig_rip_idx;
__thread uint8_t orig_rip_ctr;
struct orig_ring *orig_rip_ring;
