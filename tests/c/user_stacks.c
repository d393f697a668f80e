/*
 * A program without librip whose threads block in known user stacks, for
 * the user stack unwinder (tests/tests/user_stacks.rs). Built
 * -O2 -fomit-frame-pointer -rdynamic (the chain functions are exported, so
 * a stripped copy still names them from .dynsym) against
 * user_stacks_lib.c.
 *
 * Every blocked thread's stack, innermost first:
 *   libc ... stk_block_<kind> stk_lib_inner stk_lib_outer stk_chain_b
 *   stk_chain_a stk_thread (libc: start_thread, clone3)
 * with <kind> one of read (a pipe never written), futex
 * (pthread_cond_wait), epoll (epoll_wait on that pipe), sleep (nanosleep).
 * A "signal" thread blocks in pause() there (stk_block_pause), then gets
 * SIGUSR1, whose handler blocks in read:
 *   libc read, stk_signal_wait, stk_on_signal, __restore_rt, libc pause,
 *   stk_block_pause, ... as above.
 *
 * With `spin` after WORKERS, one more thread runs forever in
 * stk_spin_step, called in a loop by stk_block_spin, under the same chain.
 *
 * Usage: user_stacks [WORKERS [spin]]. Prints `role <kind> <tid>` for one
 * thread of each kind, `worker <kind> <tid>` for WORKERS more (kinds in
 * turn), `spinner spin <tid>` with `spin`, `ticker <tid>`, then `ready`.
 * A ticker thread sleeps 1 ms at a time and keeps the longest gap between
 * its ticks, and the longest time held between its ticks: the gap less
 * what the kernel counts as the thread running or waiting for a CPU
 * (/proc/thread-self/schedstat), so a busy machine does not add to it but
 * a stop (SIGSTOP, ptrace) or a wait on the process's own locks does. On
 * stdin, `reset` clears both (and prints `ok`), `gap` prints
 * `gap <gap ns> <held ns>`. EOF on stdin exits.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

int stk_lib_outer(int (*cb)(int), int x);

enum { K_READ, K_FUTEX, K_EPOLL, K_SLEEP, K_PAUSE, K_SPIN, K_COUNT };
static const char *kind_name[K_COUNT] = { "read", "futex", "epoll", "sleep", "signal", "spin" };

static int never[2];      /* a pipe never written */
static int sigpipe[2];    /* the signal handler blocks reading this */
static int entered[2];    /* the handler says it runs */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static volatile int sink;

struct start {
	int kind;
	int role;
	atomic_int tid;
};

__attribute__((noinline, noipa)) int stk_block_read(int x)
{
	char b;
	int r = (int)read(never[0], &b, 1);
	__asm__ volatile("" ::: "memory");
	return r + x;
}

__attribute__((noinline, noipa)) int stk_block_futex(int x)
{
	pthread_mutex_lock(&mu);
	for (;;)
		pthread_cond_wait(&cv, &mu);
	return x;
}

__attribute__((noinline, noipa)) int stk_block_epoll(int x)
{
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN };
	epoll_ctl(ep, EPOLL_CTL_ADD, never[0], &ev);
	int r = epoll_wait(ep, &ev, 1, -1);
	__asm__ volatile("" ::: "memory");
	return r + x;
}

__attribute__((noinline, noipa)) int stk_block_sleep(int x)
{
	struct timespec ts = { .tv_sec = 100000 };
	int r = nanosleep(&ts, NULL);
	__asm__ volatile("" ::: "memory");
	return r + x;
}

__attribute__((noinline, noipa)) int stk_block_pause(int x)
{
	int r = pause();
	__asm__ volatile("" ::: "memory");
	return r + x;
}

__attribute__((noinline, noipa)) int stk_signal_wait(int x)
{
	char b = 1;
	if (write(entered[1], &b, 1) != 1)
		abort();
	int r = (int)read(sigpipe[0], &b, 1);
	__asm__ volatile("" ::: "memory");
	return r + x;
}

__attribute__((noinline, noipa)) void stk_on_signal(int sig)
{
	sink += stk_signal_wait(sig);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline, noipa)) int stk_spin_step(int x)
{
	for (int i = 0; i < 100000; i++)
		sink += i ^ x;
	return sink;
}

__attribute__((noinline, noipa)) int stk_block_spin(int x)
{
	for (;;) {
		x += stk_spin_step(x);
		__asm__ volatile("" ::: "memory");
	}
	return x;
}

static int (*const blockers[K_COUNT])(int) = {
	stk_block_read, stk_block_futex, stk_block_epoll, stk_block_sleep, stk_block_pause,
	stk_block_spin,
};

__attribute__((noinline, noipa)) int stk_chain_b(int kind)
{
	int r = stk_lib_outer(blockers[kind], kind);
	__asm__ volatile("" ::: "memory");
	return r + 2;
}

__attribute__((noinline, noipa)) int stk_chain_a(int kind)
{
	int r = stk_chain_b(kind);
	__asm__ volatile("" ::: "memory");
	return r * 5;
}

__attribute__((noinline, noipa)) void *stk_thread(void *arg)
{
	struct start *s = arg;
	atomic_store(&s->tid, gettid());
	sink += stk_chain_a(s->kind);
	__asm__ volatile("" ::: "memory");
	return NULL;
}

static atomic_llong max_gap, max_held;

static long long now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* The calling thread's time on a CPU plus its time waiting for one (the
 * first two fields of /proc/thread-self/schedstat), or 0 when the kernel
 * does not keep them (then the held time is the whole gap). */
static long long cpu_and_wait_ns(int fd)
{
	char b[128];
	ssize_t n = fd < 0 ? -1 : pread(fd, b, sizeof b - 1, 0);
	if (n <= 0)
		return 0;
	b[n] = 0;
	unsigned long long on_cpu = 0, waiting = 0;
	if (sscanf(b, "%llu %llu", &on_cpu, &waiting) != 2)
		return 0;
	return (long long)(on_cpu + waiting);
}

static void *ticker(void *arg)
{
	atomic_int *tid = arg;
	atomic_store(tid, gettid());
	int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	struct timespec ms = { .tv_nsec = 1000000 };
	long long last = now_ns(), last_busy = cpu_and_wait_ns(fd);
	for (;;) {
		clock_nanosleep(CLOCK_MONOTONIC, 0, &ms, NULL);
		long long t = now_ns(), busy = cpu_and_wait_ns(fd);
		long long held = (t - last) - (busy - last_busy);
		if (t - last > atomic_load(&max_gap))
			atomic_store(&max_gap, t - last);
		if (held > atomic_load(&max_held))
			atomic_store(&max_held, held);
		last = t;
		last_busy = busy;
	}
	return NULL;
}

static pthread_t spawn(struct start *s, size_t stack)
{
	pthread_attr_t a;
	pthread_t t;
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, stack);
	if (pthread_create(&t, &a, stk_thread, s) != 0) {
		perror("pthread_create");
		exit(1);
	}
	pthread_attr_destroy(&a);
	return t;
}

static int wait_tid(atomic_int *tid)
{
	while (atomic_load(tid) == 0)
		usleep(1000);
	return atomic_load(tid);
}

/* Waits until thread `tid` is in system call `nr` (/proc's view). */
static void wait_syscall(int tid, int nr)
{
	char path[64], buf[64];
	snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
	for (;;) {
		FILE *f = fopen(path, "r");
		int got = -1;
		if (f && fgets(buf, sizeof buf, f))
			got = atoi(buf);
		if (f)
			fclose(f);
		if (got == nr)
			return;
		usleep(1000);
	}
}

int main(int argc, char **argv)
{
	int workers = argc > 1 ? atoi(argv[1]) : 0;
	if (pipe(never) || pipe(sigpipe) || pipe(entered))
		return 1;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = stk_on_signal;
	sigaction(SIGUSR1, &sa, NULL);

	int spin = argc > 2 && strcmp(argv[2], "spin") == 0;
	struct start roles[K_COUNT];
	pthread_t role_threads[K_COUNT];
	for (int k = 0; k < K_SPIN + spin; k++) {
		roles[k].kind = k;
		atomic_store(&roles[k].tid, 0);
		role_threads[k] = spawn(&roles[k], 256 << 10);
	}
	struct start *many = calloc((size_t)workers + 1, sizeof *many);
	for (int i = 0; i < workers; i++) {
		many[i].kind = i % K_PAUSE; /* read, futex, epoll, sleep in turn */
		spawn(&many[i], 128 << 10);
	}
	atomic_int ticker_tid = 0;
	pthread_t tt;
	pthread_create(&tt, NULL, ticker, &ticker_tid);

	for (int k = 0; k < K_SPIN; k++)
		printf("role %s %d\n", kind_name[k], wait_tid(&roles[k].tid));
	if (spin)
		printf("spinner spin %d\n", wait_tid(&roles[K_SPIN].tid));
	for (int i = 0; i < workers; i++)
		printf("worker %s %d\n", kind_name[many[i].kind], wait_tid(&many[i].tid));
	printf("ticker %d\n", wait_tid(&ticker_tid));

	/* The signal thread gets SIGUSR1 only once it is in pause(), so the
	 * frames under the handler are known. */
	wait_syscall(roles[K_PAUSE].tid, 34 /* x86-64 pause */);
	pthread_kill(role_threads[K_PAUSE], SIGUSR1);
	char b;
	if (read(entered[0], &b, 1) != 1)
		return 1;
	/* Let every thread reach its blocking call. */
	usleep(200000);
	printf("ready\n");
	fflush(stdout);

	char line[64];
	while (fgets(line, sizeof line, stdin)) {
		if (strncmp(line, "reset", 5) == 0) {
			atomic_store(&max_gap, 0);
			atomic_store(&max_held, 0);
			printf("ok\n");
		}
		else if (strncmp(line, "gap", 3) == 0)
			printf("gap %lld %lld\n", (long long)atomic_load(&max_gap),
			       (long long)atomic_load(&max_held));
		fflush(stdout);
	}
	return 0;
}
