/* The LTTng-UST tracepoint provider of loop.c (-DLOOP_LTTNG). */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER rip_bench

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./loop_tp.h"

#if !defined(RIP_BENCH_LOOP_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define RIP_BENCH_LOOP_TP_H

#include <lttng/tracepoint.h>

/* "f ran": no payload, like the USDT marker and the snap. */
LTTNG_UST_TRACEPOINT_EVENT(rip_bench, f_ran, LTTNG_UST_TP_ARGS(), LTTNG_UST_TP_FIELDS())

#endif

#include <lttng/tracepoint-event.h>
