//go:build unix

// Package cputime reads the CPU time the process has used: the measure
// of a benchmark's cost that other processes on a busy machine disturb
// far less than its wall time.
package cputime

import (
	"syscall"
	"time"
)

// Process is the CPU time, user and system, the process used so far (0
// if it cannot be read).
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
