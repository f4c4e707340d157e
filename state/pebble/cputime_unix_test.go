//go:build unix

package pebble_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time, user and system, the process used so far: a
// measure of a benchmark's cost that other processes on a busy machine
// disturb far less than its wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
