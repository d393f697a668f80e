/*
 * maxrss OUT PROG [ARGS...]: runs PROG and writes its peak RSS, wall
 * time and CPU time (user + system) to OUT, as "maxrss_kib N", "wall_ns T"
 * and "cpu_ns C" lines, plus "status S" (its exit status, or 128 + the
 * signal that killed it). CPU time does not grow when other work shares
 * the machine; wall time does.
 *
 * Why a helper: Linux carries the parent's peak RSS into a child's
 * ru_maxrss across fork and exec, so a large parent would overstate every
 * child's peak. This helper is small; so is what its children inherit.
 */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s OUT PROG [ARGS...]\n", argv[0]);
        return 2;
    }
    uint64_t t0 = bench_now_ns();
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        execvp(argv[2], argv + 2);
        perror(argv[2]);
        _exit(127);
    }
    int st = 0;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) != pid) {
        perror("wait4");
        return 1;
    }
    uint64_t wall = bench_now_ns() - t0;
    int status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    FILE *out = fopen(argv[1], "w");
    if (out == NULL) {
        perror(argv[1]);
        return 1;
    }
    unsigned long long cpu =
        (unsigned long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ULL +
        (unsigned long long)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ULL;
    fprintf(out, "maxrss_kib %ld\nwall_ns %llu\ncpu_ns %llu\nstatus %d\n", ru.ru_maxrss,
            (unsigned long long)wall, cpu, status);
    return fclose(out) == 0 ? status : 1;
}
