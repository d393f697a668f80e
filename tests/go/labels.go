// A Go program whose goroutines carry pprof labels (pprof.Do), in known
// numbers, each parked on one channel: the tests read the labels from
// outside with rip-probe.
//
//   - 3 in main.resize, labels job=resize, worker=0..2 (one each);
//   - 4 in main.index, labels job=index; the first starts one more, in
//     main.inherited, which has its creator's labels;
//   - 2 in main.plain, without labels;
//   - 1 in main.many, with 20 labels k00=v00 … k19=v19 and long=600 x's.
//
// It prints "ready" once every goroutine was started (the test then polls
// rip-probe until they are parked), then waits until stdin closes.
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
)

var (
	block   = make(chan struct{})
	started sync.WaitGroup
)

//go:noinline
func resize() { <-block }

//go:noinline
func index() { <-block }

//go:noinline
func inherited() { <-block }

//go:noinline
func plain() { <-block }

//go:noinline
func many() { <-block }

func main() {
	ctx := context.Background()
	started.Add(3 + 4 + 1 + 2 + 1)
	for i := 0; i < 3; i++ {
		labels := pprof.Labels("job", "resize", "worker", strconv.Itoa(i))
		go pprof.Do(ctx, labels, func(context.Context) {
			started.Done()
			resize()
		})
	}
	for i := 0; i < 4; i++ {
		first := i == 0
		go pprof.Do(ctx, pprof.Labels("job", "index"), func(context.Context) {
			if first {
				go func() {
					started.Done()
					inherited()
				}()
			}
			started.Done()
			index()
		})
	}
	for i := 0; i < 2; i++ {
		go func() {
			started.Done()
			plain()
		}()
	}
	var kv []string
	for i := 0; i < 20; i++ {
		kv = append(kv, fmt.Sprintf("k%02d", i), fmt.Sprintf("v%02d", i))
	}
	kv = append(kv, "long", strings.Repeat("x", 600))
	go pprof.Do(ctx, pprof.Labels(kv...), func(context.Context) {
		started.Done()
		many()
	})
	started.Wait()
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
	}
}
