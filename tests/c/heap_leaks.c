/* The heap workload of tests/tests/leaks.rs: after `ready`, each line `go`
 * on stdin runs one round — leak_path() loses LEAK_BLOCKS blocks of
 * LEAK_SIZE bytes from malloc (through leak_here()), leak_zeroed() loses
 * LEAK_ZEROED blocks from calloc, and balanced_heap() allocates and frees
 * about a thousand more through the whole malloc family (malloc, calloc,
 * realloc, reallocarray, posix_memalign, aligned_alloc, memalign) — and
 * prints `done`. The test traces the rounds it asks for, and knows what
 * each left behind. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEAK_BLOCKS 40
#define LEAK_SIZE 1000
#define LEAK_ZEROED 10
#define ZEROED_N 10
#define ZEROED_SIZE 100

/* Every block is written and published, so the compiler keeps each call
 * (a malloc whose block is never used may be removed). */
void *volatile last;

__attribute__((noinline)) static void touch(void *p, size_t n) {
    if (p) {
        memset(p, 1, n < 64 ? n : 64);
        last = p;
    }
}

__attribute__((noinline)) void leak_here(void) {
    touch(malloc(LEAK_SIZE), LEAK_SIZE); /* LEAK: malloc */
}

__attribute__((noinline)) void leak_path(void) {
    for (int i = 0; i < LEAK_BLOCKS; i++)
        leak_here();
}

__attribute__((noinline)) void leak_zeroed(void) {
    for (int i = 0; i < LEAK_ZEROED; i++)
        touch(calloc(ZEROED_N, ZEROED_SIZE), ZEROED_N * ZEROED_SIZE); /* LEAK: calloc */
}

__attribute__((noinline)) void balanced_heap(void) {
    void *keep[100];
    for (int i = 0; i < 100; i++) {
        keep[i] = malloc(16 + i * 8);
        touch(keep[i], 16);
    }
    for (int i = 0; i < 100; i++)
        free(keep[i]);
    for (int i = 0; i < 400; i++) {
        void *p = malloc(32 + (i % 7) * 100);
        touch(p, 32);
        free(p);
    }
    for (int i = 0; i < 100; i++) {
        void *p = calloc(4, 50 + i);
        touch(p, 4);
        free(p);
    }
    for (int i = 0; i < 50; i++) {
        char *p = malloc(8);
        for (int n = 16; n <= 1024; n *= 2) {
            p = realloc(p, n);
            touch(p, n);
        }
        p = reallocarray(p, 3, 100);
        touch(p, 300);
        free(p);
    }
    for (int i = 0; i < 50; i++) {
        void *p = NULL;
        if (posix_memalign(&p, 64, 200) == 0) {
            touch(p, 200);
            free(p);
        }
        p = aligned_alloc(128, 256);
        touch(p, 256);
        free(p);
        p = memalign(256, 512);
        touch(p, 512);
        free(p);
    }
}

int main(void) {
    char line[64];
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "go", 2) != 0)
            continue;
        leak_path();
        leak_zeroed();
        balanced_heap();
        printf("done\n");
        fflush(stdout);
    }
    return 0;
}
