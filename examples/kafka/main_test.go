package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The example verifies its own output (run returns an error on any
// difference from the batch answer), without and with failures.
func TestExampleVerifies(t *testing.T) {
	for _, kills := range []int{0, 3} {
		if err := run("", 20_000, 10, 2, kills, 1); err != nil {
			t.Fatalf("-kill %d: %v", kills, err)
		}
	}
}
