/*
 * A C program that uses librip through librip.h only: the original API
 * (rip_create_ring, rip_init for threads and coroutines, rip_exit,
 * rip_snap), the inline snap, and the scheduler calls. It prints what it
 * did, one `key value` line per fact, for the test to check in the ring.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "librip.h"

static void name_init(const char *name) { rip_init(0, name, strlen(name), 0, 0); }

static void *worker(void *arg)
{
    char name[32];
    snprintf(name, sizeof name, "c-worker-%d", *(int *)arg);
    name_init(name);
    for (int i = 0; i < 10; i++)
        rip_snap();
    for (int i = 0; i < 5; i++)
        RIP_SNAP();
    rip_exit();
    rip_snap(); /* after exit: the sink */
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: ring_user RING\n");
        return 2;
    }
    rip_snap(); /* before any ring: the sink */
    if (!rip_create_ring(argv[1], 0))
        return 1;
    name_init("c-main");
    for (int i = 0; i < 3; i++)
        rip_snap();
    for (int i = 0; i < 4; i++)
        RIP_SNAP();

    pthread_t t[2];
    int ids[2] = {0, 1};
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, &ids[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);

    /* The explicit cursor API. */
    rip_coro_t co;
    if (!rip_coro_begin(0, "sched-co", 8, &co))
        return 1;
    rip_cursor_t prev = rip_coro_switch(co);
    rip_coro_poll_begin(co);
    for (int i = 0; i < 4; i++)
        RIP_SNAP();
    rip_coro_poll_end(co);
    rip_cursor_restore(prev);
    rip_snap();

    /* The original coroutine protocol: rip_init(id) switches to its slot. */
    rip_init(42, "coro-42", 7, 0, 0);
    for (int i = 0; i < 6; i++)
        RIP_SNAP();
    name_init("c-main"); /* back to the thread's own slot */
    rip_snap();
    /* A scheduler's saved (idx, ctr) seed a fresh slot's sequence. */
    rip_init(7, "coro-7", 6, 5, 1);
    for (int i = 0; i < 3; i++)
        RIP_SNAP();
    rip_init(42, "coro-42", 7, 0, 0); /* the same slot again */
    rip_snap();
    rip_snap();
    rip_exit(); /* coroutine 42 exits; back to the thread's slot */
    RIP_SNAP();
    rip_init(7, "coro-7", 6, 0, 0);
    rip_exit();

    printf("sched-co %llu %u\n", (unsigned long long)co.id, co.index);
    printf("dropped %llu\n", (unsigned long long)rip_dropped_snaps());
    printf("main %p\n", (void *)main);
    return 0;
}
