/*
 * `sites RING`: threads that snap at known sites (the lines marked
 * SITE: <name>), for the site-table tests built without -g, stripped and
 * with LTO. Prints `role <name> <tid>` lines, `ready`, and waits to be
 * killed.
 */
#define _GNU_SOURCE
#include <librip.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static pthread_barrier_t ready;

static void hold(const char *name) {
    printf("role %s %d\n", name, (int)gettid());
    fflush(stdout);
}

static void *alpha(void *arg) {
    (void)arg;
    rip_init(0, "c-alpha", strlen("c-alpha"), 0, 0);
    hold("c-alpha");
    RIP_SNAP_LABEL("waiting for the order book"); /* SITE: c-alpha */
    pthread_barrier_wait(&ready);
    for (;;)
        pause();
    return NULL;
}

static void *beta(void *arg) {
    (void)arg;
    rip_init(0, "c-beta", strlen("c-beta"), 0, 0);
    hold("c-beta");
    rip_snap(); /* SITE: c-beta */
    pthread_barrier_wait(&ready);
    for (;;)
        pause();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2 || !rip_create_ring(argv[1], 64))
        return 1;
    pthread_barrier_init(&ready, NULL, 3);
    pthread_t a, b;
    pthread_create(&a, NULL, alpha, NULL);
    pthread_create(&b, NULL, beta, NULL);
    pthread_barrier_wait(&ready);
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}
