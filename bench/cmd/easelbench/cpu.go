package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// userHZ is the unit of utime and stime in /proc/<pid>/stat (USER_HZ, 100 on
// every Linux platform Go supports).
const userHZ = 100

// cpuTime is the CPU time, user and system, a running process has used.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: fields are counted
	// after its closing parenthesis, from field 3 (state).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(string(f[11]), 10, 64) // field 14, utime
	st, err2 := strconv.ParseInt(string(f[12]), 10, 64) // field 15, stime
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / userHZ, nil
}

// cpuTimes is the CPU time several running processes have used, summed.
func cpuTimes(pids []int) (time.Duration, error) {
	var total time.Duration
	for _, pid := range pids {
		d, err := cpuTime(pid)
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}

// selfCPU is the CPU time this process (the load generator) has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMeter reads the CPU time of several processes at the start and end of
// a measured run. A name may stand for several processes (Redis on a
// cluster: one per node), whose CPU times are summed.
type cpuMeter struct {
	pids  map[string][]int // name → pids; "self" is this process
	start map[string]time.Duration
}

func newCPUMeter(pids map[string][]int) *cpuMeter {
	m := &cpuMeter{pids: pids, start: map[string]time.Duration{}}
	for name := range pids {
		m.start[name] = m.read(name)
	}
	return m
}

func (m *cpuMeter) read(name string) time.Duration {
	if name == "self" {
		return selfCPU()
	}
	d, err := cpuTimes(m.pids[name])
	if err != nil {
		return 0
	}
	return d
}

// perOp returns each process's CPU microseconds per operation since the
// meter was made.
func (m *cpuMeter) perOp(ops int64) map[string]float64 {
	out := map[string]float64{}
	if ops <= 0 {
		return out
	}
	for name := range m.pids {
		out[name] = float64(m.read(name)-m.start[name]) / float64(time.Microsecond) / float64(ops)
	}
	return out
}
