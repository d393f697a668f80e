// Threads of a Go program asleep in the Go runtime's own futexes, for
// rip-probe's lock tests: idle Ms parked on their notes (the runtime
// started several to run goroutines that have since blocked), sysmon in
// its timed sleep, and goroutines blocked on a sync.Mutex and a channel
// (parked goroutines: no thread sleeps for them). Prints `ready` once the
// work that started the Ms is done, and exits when stdin closes.
package main

import (
	"fmt"
	"os"
	"runtime"
	"sync"
)

func main() {
	runtime.GOMAXPROCS(4)
	var mu sync.Mutex
	mu.Lock()
	for i := 0; i < 4; i++ {
		go func() { mu.Lock() }()
	}
	// Busy goroutines make the runtime start an M per P; once they end,
	// those Ms have nothing to run and park.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for j := 0; j < 50_000_000; j++ {
				x += j
			}
			_ = x
		}()
	}
	wg.Wait()
	never := make(chan int)
	go func() { <-never }()
	fmt.Println("ready")
	buf := make([]byte, 1)
	for {
		if n, err := os.Stdin.Read(buf); n == 0 || err != nil {
			break
		}
	}
}
