/*
 * The protocol every benchmark workload speaks with `cargo xtask bench`:
 * with --wait it prints "ready" and waits for a line on stdin before the
 * measured part, so that a tracer attaches first and its attach time is
 * not counted; it then prints "calls N elapsed_ns T nivcsw K": the
 * measured part alone timed with CLOCK_MONOTONIC, and the involuntary
 * context switches the process suffered meanwhile (bench_start() and
 * bench_report() bracket the measured part).
 */
#ifndef RIP_BENCH_H
#define RIP_BENCH_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static inline uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Parses "N [--wait]" from argv[first..]; exits with usage on error. */
static inline uint64_t bench_args(int argc, char **argv, int first, int *wait)
{
    char *end = NULL;
    if (argc <= first) {
        fprintf(stderr, "usage: %s %sN [--wait]\n", argv[0], first > 1 ? "MODE " : "");
        exit(2);
    }
    uint64_t n = strtoull(argv[first], &end, 10);
    if (end == argv[first] || *end != '\0') {
        fprintf(stderr, "%s: not a count: %s\n", argv[0], argv[first]);
        exit(2);
    }
    *wait = argc > first + 1 && strcmp(argv[first + 1], "--wait") == 0;
    return n;
}

/* With --wait: "ready", then block until a line (or EOF) on stdin. */
static inline void bench_wait(int wait)
{
    if (!wait)
        return;
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (fgets(line, sizeof line, stdin) == NULL)
        clearerr(stdin);
}

/* Involuntary context switches of the whole process so far. */
static inline uint64_t bench_nivcsw(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_nivcsw;
}

static uint64_t bench_nivcsw_start;

/* The start of the measured part: returns its start time. */
static inline uint64_t bench_start(void)
{
    bench_nivcsw_start = bench_nivcsw();
    return bench_now_ns();
}

/* The end of the measured part, which started at `t0`. */
static inline void bench_report(uint64_t calls, uint64_t t0)
{
    uint64_t elapsed_ns = bench_now_ns() - t0;
    printf("calls %llu elapsed_ns %llu nivcsw %llu\n", (unsigned long long)calls,
           (unsigned long long)elapsed_ns,
           (unsigned long long)(bench_nivcsw() - bench_nivcsw_start));
    fflush(stdout);
}

#endif
