/*
 * The SystemTap talk's loop: a noinline f() called N times. What records
 * that f ran is chosen at compile time:
 *
 *   (nothing)      the baseline
 *   -DLOOP_LIBRIP  librip's inline RIP_SNAP() from librip.h
 *   -DLOOP_USDT    a USDT marker, DTRACE_PROBE from <sys/sdt.h>
 *   -DLOOP_LTTNG   an LTTng-UST tracepoint (provider in loop_tp.h)
 *
 * Dynamic probes (uprobes, gdb breakpoints) attach to f of the baseline.
 *
 * Usage: loop N [--wait]   (see bench.h; exit status 0 when f ran N times)
 */
#include "bench.h"

#if defined(LOOP_LIBRIP)
#include <unistd.h>

#include "librip.h"
#define RECORD() RIP_SNAP()
#elif defined(LOOP_USDT)
#include <sys/sdt.h>
#define RECORD() DTRACE_PROBE(rip_bench, f_ran)
#elif defined(LOOP_LTTNG)
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_DEFINE
#include "loop_tp.h"
#define RECORD() lttng_ust_tracepoint(rip_bench, f_ran)
#else
#define RECORD() ((void)0)
#endif

uint64_t count;

/* noipa: the compiler may neither inline f nor use what it knows of it. */
__attribute__((noinline, noipa)) void f(void)
{
    RECORD();
    count++;
}

/* The measured loop (callgrind counts instructions inside it). */
__attribute__((noinline, noipa)) void run_loop(uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        f();
}

int main(int argc, char **argv)
{
    int wait = 0;
    uint64_t n = bench_args(argc, argv, 1, &wait);
#if defined(LOOP_LIBRIP)
    char ring[64];
    snprintf(ring, sizeof ring, "/dev/shm/rip-bench-loop.%d.ring", (int)getpid());
    rip_options_t opts = {.thread_slots = 4, .coroutine_slots = 0, .depth = 0};
    if (!rip_create_ring_ex(ring, &opts))
        return 1;
    rip_init(0, "loop", 4, 0, 0);
#endif
    bench_wait(wait);
    uint64_t t0 = bench_start();
    run_loop(n);
    bench_report(count, t0);
#if defined(LOOP_LIBRIP)
    unlink(ring);
#endif
    return count == n ? 0 : 1;
}
