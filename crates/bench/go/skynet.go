// skynet: the Go row of spindle-bench's `skynet_w<N>` bench (the skynet benchmark,
// github.com/atemerev/skynet): a 10-ary tree of goroutines, 1,000,000 leaves each sending its
// id over an unbuffered channel, every inner node summing its 10 children's values.
//
// spindle-bench builds this file with `go build` at bench time and runs it with GOMAXPROCS
// set to the worker count:
//
//	skynet <target-ms> [warm-up]
//
// It runs one whole tree as a warm-up (unless warm-up is 0; spindle-bench passes 0 with
// --quick), then whole trees until target-ms of wall time has
// passed (at least one), timing each from the root's spawn to its sum (Go runtime start-up is
// not timed), checks every sum, and prints one line:
//
//	ns_per_goroutine=<float> runs=<n> gomaxprocs=<n>
//
// where ns_per_goroutine is the timed total divided by runs * 1,111,111 (every node, the
// root included, is a goroutine).
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"
)

const leaves = 1000000
const goroutines = 1111111
const want = leaves * (leaves - 1) / 2

func skynet(c chan<- int64, num int64, size int64) {
	if size == 1 {
		c <- num
		return
	}
	rc := make(chan int64)
	step := size / 10
	for i := int64(0); i < 10; i++ {
		go skynet(rc, num+i*step, step)
	}
	var sum int64
	for i := 0; i < 10; i++ {
		sum += <-rc
	}
	c <- sum
}

func run() time.Duration {
	start := time.Now()
	c := make(chan int64)
	go skynet(c, 0, leaves)
	sum := <-c
	t := time.Since(start)
	if sum != want {
		fmt.Fprintf(os.Stderr, "skynet: sum %d, expected %d\n", sum, int64(want))
		os.Exit(1)
	}
	return t
}

func main() {
	if len(os.Args) != 2 && len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: skynet <target-ms> [warm-up]")
		os.Exit(2)
	}
	ms, err := strconv.Atoi(os.Args[1])
	if err != nil || ms < 0 {
		fmt.Fprintf(os.Stderr, "skynet: bad target-ms %q\n", os.Args[1])
		os.Exit(2)
	}
	target := time.Duration(ms) * time.Millisecond
	if len(os.Args) == 2 || os.Args[2] != "0" {
		run()
	}
	wall := time.Now()
	var timed time.Duration
	runs := 0
	for runs == 0 || time.Since(wall) < target {
		timed += run()
		runs++
	}
	ns := float64(timed.Nanoseconds()) / (float64(runs) * goroutines)
	fmt.Printf("ns_per_goroutine=%g runs=%d gomaxprocs=%d\n", ns, runs, runtime.GOMAXPROCS(0))
}
