/*
 * A program built without librip with 1,000 functions fn_000 … fn_999,
 * for attaching uprobes in bulk. It prints "ready", then runs commands
 * read from stdin, one per line, on its main thread:
 *
 *   call N     calls fn_000 … fn_999 in order, N rounds, then prints "done"
 *              on stderr (the test harness keeps stdout until "ready")
 *   exit       exit
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile unsigned long sink;

/* noipa: neither inlined nor merged with a twin (each adds its own number
 * anyway), so each is a function of its own with its own uprobe. */
#define F(a, b, c)                                                                       \
	__attribute__((noipa)) void fn_##a##b##c(void) { sink += a * 100 + b * 10 + c + 1; }
#define F10(a, b)                                                                        \
	F(a, b, 0) F(a, b, 1) F(a, b, 2) F(a, b, 3) F(a, b, 4) F(a, b, 5) F(a, b, 6)     \
	F(a, b, 7) F(a, b, 8) F(a, b, 9)
#define F100(a)                                                                          \
	F10(a, 0) F10(a, 1) F10(a, 2) F10(a, 3) F10(a, 4) F10(a, 5) F10(a, 6) F10(a, 7)  \
	F10(a, 8) F10(a, 9)
F100(0) F100(1) F100(2) F100(3) F100(4) F100(5) F100(6) F100(7) F100(8) F100(9)

#define P(a, b, c) fn_##a##b##c,
#define P10(a, b)                                                                        \
	P(a, b, 0) P(a, b, 1) P(a, b, 2) P(a, b, 3) P(a, b, 4) P(a, b, 5) P(a, b, 6)     \
	P(a, b, 7) P(a, b, 8) P(a, b, 9)
#define P100(a)                                                                          \
	P10(a, 0) P10(a, 1) P10(a, 2) P10(a, 3) P10(a, 4) P10(a, 5) P10(a, 6) P10(a, 7)  \
	P10(a, 8) P10(a, 9)
static void (*const functions[])(void) = {
	P100(0) P100(1) P100(2) P100(3) P100(4) P100(5) P100(6) P100(7) P100(8) P100(9)
};

int main(void)
{
	char line[64];
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		unsigned long n;
		if (sscanf(line, "call %lu", &n) == 1) {
			for (unsigned long r = 0; r < n; r++)
				for (size_t i = 0; i < sizeof functions / sizeof functions[0]; i++)
					functions[i]();
			fprintf(stderr, "done\n");
		} else if (strncmp(line, "exit", 4) == 0) {
			return 0;
		}
	}
	return 0;
}
