// A Go program whose functions are called in known numbers: for each
// line N it reads from stdin, main.work is called N times, each call
// growing its goroutine's stack (deep recursion in main.deep, which the
// runtime copies to a larger stack) and forcing a garbage collection
// every 100 calls (which walks every stack); then it appends "done N"
// to the file its argument names (its stdout is the test's only until
// "ready"). The tests probe main.work in a stripped build of it.
package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
)

var sink int

//go:noinline
func deep(n int) int {
	var pad [64]byte
	pad[n%64] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return deep(n-1) + int(pad[n%64])
}

//go:noinline
func work(i int) {
	done := make(chan int)
	// A new goroutine's stack starts small: the recursion grows it,
	// under work's frame when work runs on it.
	go func() {
		done <- deep(2000)
	}()
	sink += <-done + deep(2000)
	if i%100 == 0 {
		runtime.GC()
	}
}

func main() {
	log, err := os.OpenFile(os.Args[1], os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		panic(err)
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		n, err := strconv.Atoi(in.Text())
		if err != nil {
			panic(err)
		}
		for i := 0; i < n; i++ {
			work(i)
		}
		fmt.Fprintln(log, "done", n)
	}
}
