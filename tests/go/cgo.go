// A Go program with one goroutine blocked in C: a cgo call to a C
// function that waits in read(2) on a pipe nobody writes. The goroutine
// tests read its C frames, which are on its thread's stack, not on the
// goroutine's. It prints "ready" once the goroutine was started, then
// waits until stdin closes.
package main

/*
#include <unistd.h>

static int fds[2];

__attribute__((noinline)) static void blocked_in_c(void) {
	char c;
	if (pipe(fds) == 0) {
		(void)read(fds[0], &c, 1);
	}
}
*/
import "C"

import (
	"bufio"
	"fmt"
	"os"
)

//go:noinline
func inC() { C.blocked_in_c() }

func main() {
	go inC()
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
}
