/*
 * A ucontext coroutine scheduler instrumented with librip's scheduler
 * calls: every coroutine has a slot (rip_coro_begin); the scheduler points
 * its thread's snaps at a coroutine's slot while it runs (rip_coro_switch,
 * which returns the scheduler's own cursor) and takes them back when it
 * yields (rip_cursor_restore), counting each run as a poll. Snaps made
 * while a coroutine runs therefore land in that coroutine's slot, and the
 * scheduler's own snaps in the thread's slot.
 *
 * Three coroutines run ROUNDS rounds round-robin, snapping at their own
 * lines (marked SNAP: <label>) and yielding in between. "fetch" then
 * returns and exits; a fourth coroutine, "store", takes its slot (the next
 * generation) and runs once. "parse" and "store" are left parked; the
 * program prints `coro <name> <id> <index> <generation>` lines and exits.
 *
 * Usage: coro_sched RING
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include "librip.h"

#define ROUNDS 3
#define STACK (64 * 1024)

struct coro {
    const char *name;
    void (*body)(void);
    rip_coro_t rip;
    ucontext_t ctx;
    char *stack;
    int done;
};

static ucontext_t sched_ctx;
static struct coro *running;

/* Back to the scheduler; returns when scheduled again. */
static void yield(void) { swapcontext(&running->ctx, &sched_ctx); }

static void fetch(void)
{
    for (int i = 0; i < ROUNDS; i++) {
        RIP_SNAP(); /* SNAP: fetch-connect */
        yield();
        rip_snap(); /* SNAP: fetch-read */
        yield();
    }
}

static void parse(void)
{
    for (;;) {
        RIP_SNAP(); /* SNAP: parse-header */
        yield();
    }
}

static void compress(void)
{
    for (;;) {
        RIP_SNAP(); /* SNAP: compress-block */
        yield();
        RIP_SNAP(); /* SNAP: compress-flush */
        yield();
    }
}

/* Not a copy of parse: the compiler would fold identical functions (and
 * rip_snap() is the same inline snap as RIP_SNAP()), so it counts too. */
static volatile unsigned stored;

static void store(void)
{
    for (;;) {
        rip_snap(); /* SNAP: store-write */
        stored++;
        yield();
    }
}

static void trampoline(void)
{
    running->body();
    running->done = 1;
    swapcontext(&running->ctx, &sched_ctx);
}

static int spawn(struct coro *c)
{
    if (!rip_coro_begin(0, c->name, strlen(c->name), &c->rip))
        return -1;
    c->stack = malloc(STACK);
    if (!c->stack || getcontext(&c->ctx) != 0)
        return -1;
    c->ctx.uc_stack.ss_sp = c->stack;
    c->ctx.uc_stack.ss_size = STACK;
    c->ctx.uc_link = NULL;
    makecontext(&c->ctx, trampoline, 0);
    return 0;
}

/* Runs `c` until it yields: its slot is the thread's snap target meanwhile. */
static void run(struct coro *c)
{
    rip_cursor_t mine = rip_coro_switch(c->rip);
    rip_coro_poll_begin(c->rip);
    running = c;
    swapcontext(&sched_ctx, &c->ctx);
    running = NULL;
    rip_coro_poll_end(c->rip);
    rip_cursor_restore(mine);
    RIP_SNAP(); /* SNAP: sched-switch */
    if (c->done) {
        rip_coro_exit(c->rip);
        free(c->stack);
        c->stack = NULL;
    }
}

static void say(const struct coro *c)
{
    printf("coro %s %llu %u %u\n", c->name, (unsigned long long)c->rip.id, c->rip.index,
           c->rip.generation);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: coro_sched RING\n");
        return 2;
    }
    if (!rip_create_ring(argv[1], 64))
        return 1;
    rip_init(0, "scheduler", 9, 0, 0);
    rip_cursor_t own = rip_cursor_save();

    struct coro cs[] = {
        {.name = "fetch", .body = fetch},
        {.name = "parse", .body = parse},
        {.name = "compress", .body = compress},
    };
    const int n = sizeof cs / sizeof cs[0];
    for (int i = 0; i < n; i++) {
        if (spawn(&cs[i]) != 0)
            return 1;
        say(&cs[i]);
    }
    /* fetch yields twice a round and returns after ROUNDS rounds. */
    while (!cs[0].done) {
        for (int i = 0; i < n; i++) {
            if (!cs[i].done)
                run(&cs[i]);
        }
    }
    struct coro st = {.name = "store", .body = store};
    if (spawn(&st) != 0)
        return 1;
    say(&st);
    run(&st);

    rip_cursor_t now = rip_cursor_save();
    printf("cursor-restored %d\n", now.seq == own.seq && now.epoch == own.epoch);
    fflush(stdout);
    return 0;
}
