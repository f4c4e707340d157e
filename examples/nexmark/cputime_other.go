//go:build !unix

package main

import "time"

// cpuTime is unknown here: events/s/core is then reported as 0.
func cpuTime() time.Duration { return 0 }
