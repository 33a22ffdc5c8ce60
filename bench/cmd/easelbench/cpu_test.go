package main

import (
	"os"
	"testing"
	"time"
)

func TestCPUTime(t *testing.T) {
	before, err := cpuTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn about 300 ms of CPU.
	x := 0
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		for i := 0; i < 1000; i++ {
			x += i
		}
	}
	_ = x
	after, err := cpuTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The clock is shared: other processes may take the CPU, so only a lower
	// bound on what was counted is not certain. Check it moved and stayed
	// within wall time.
	if d := after - before; d <= 0 || d > 2*time.Second {
		t.Errorf("cpu time moved %v while burning 300ms", d)
	}
	if self := selfCPU(); self < after-100*time.Millisecond {
		t.Errorf("getrusage %v, /proc %v", self, after)
	}
	if _, err := cpuTime(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}
