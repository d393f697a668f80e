// A Go program whose goroutines wait in known places, in known numbers:
// the goroutine tests read them from outside with rip-probe.
//
// Usage: goroutines RECV SEND SELECT MUTEX WAITGROUP SLEEP NET FIFO SPIN
// It prints "ready" once every goroutine was started (the test then polls
// rip-probe until the counts hold still), then waits until stdin closes.
// With TICK set, a ticker goroutine measures how late its ticks come (the
// pauses a reader of the process causes): each line read from stdin is
// answered with the longest delay since the previous line ("late N us"),
// which starts a new measure. With PPROF set, it serves net/http/pprof on
// a port of 127.0.0.1 it prints first ("pprof 127.0.0.1:PORT").
package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var (
	recvCh = make(chan int)
	sendCh = make(chan int)
	selA   = make(chan int)
	selB   = make(chan int)
	mu     sync.Mutex
	wg     sync.WaitGroup
	spins  uint64
)

//go:noinline
func receiver() { <-recvCh }

//go:noinline
func sender() { sendCh <- 1 }

//go:noinline
func selecter() {
	select {
	case <-selA:
	case <-selB:
	}
}

//go:noinline
func locker() {
	mu.Lock()
	mu.Unlock()
}

//go:noinline
func waiter() { wg.Wait() }

//go:noinline
func sleeper() { time.Sleep(24 * time.Hour) }

//go:noinline
func netReader(c net.Conn) {
	buf := make([]byte, 1)
	c.Read(buf)
}

//go:noinline
func fifoReader(fd int) {
	buf := make([]byte, 1)
	syscall.Read(fd, buf)
}

//go:noinline
func spinner() {
	for {
		atomic.AddUint64(&spins, 1)
	}
}

func main() {
	n := make([]int, 9)
	for i := range n {
		v, err := strconv.Atoi(os.Args[1+i])
		if err != nil {
			panic(err)
		}
		n[i] = v
	}
	mu.Lock()
	wg.Add(1)
	for i := 0; i < n[0]; i++ {
		go receiver()
	}
	for i := 0; i < n[1]; i++ {
		go sender()
	}
	for i := 0; i < n[2]; i++ {
		go selecter()
	}
	for i := 0; i < n[3]; i++ {
		go locker()
	}
	for i := 0; i < n[4]; i++ {
		go waiter()
	}
	for i := 0; i < n[5]; i++ {
		go sleeper()
	}
	if n[6] > 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		var clients []net.Conn
		for i := 0; i < n[6]; i++ {
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				panic(err)
			}
			clients = append(clients, c)
			s, err := l.Accept()
			if err != nil {
				panic(err)
			}
			go netReader(s)
		}
		defer func() { _ = clients }()
	}
	if n[7] > 0 {
		dir, err := os.MkdirTemp("", "goroutines")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "fifo")
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			panic(err)
		}
		for i := 0; i < n[7]; i++ {
			// Read and write: open does not wait for a writer, and read
			// blocks in the kernel, nobody writing.
			fd, err := syscall.Open(path, syscall.O_RDWR, 0)
			if err != nil {
				panic(err)
			}
			go fifoReader(fd)
		}
	}
	for i := 0; i < n[8]; i++ {
		go spinner()
	}
	var late int64
	if os.Getenv("TICK") != "" {
		go func() {
			const every = time.Millisecond
			last := time.Now()
			for range time.Tick(every) {
				now := time.Now()
				d := int64(now.Sub(last) - every)
				for {
					old := atomic.LoadInt64(&late)
					if d <= old || atomic.CompareAndSwapInt64(&late, old, d) {
						break
					}
				}
				last = now
			}
		}()
	}
	if os.Getenv("PPROF") != "" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		fmt.Println("pprof", l.Addr())
		go http.Serve(l, nil)
	}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fmt.Printf("late %d us\n", atomic.SwapInt64(&late, 0)/1000)
	}
}
