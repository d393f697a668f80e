// A Go program whose symbols rip-probe reads from .gopclntab: main.double
// is inlined into main.main, and main.readHere blocks its thread in a read
// of stdin (the goroutine is locked to its thread, so the thread's stack
// shows it). Prints `ready` first, and exits when stdin closes.
package main

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
)

func double(x int) int {
	return x * len(os.Args) // inlined here
}

//go:noinline
func readHere(buf []byte) int {
	n, _ := syscall.Read(0, buf) // blocks here
	return n
}

func main() {
	runtime.LockOSThread()
	fmt.Println("double", double(21)) // calls double
	fmt.Println("ready")
	buf := make([]byte, 1)
	for readHere(buf) > 0 {
	}
}
