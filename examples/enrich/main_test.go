package main

import (
	"context"
	"io"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The example verifies its enriched visits against the batch computation,
// with and without injected failures (run returns an error on any
// mismatch, and when fewer failures fired than asked for).
func TestEnrichVerifies(t *testing.T) {
	for _, kill := range []int{0, 2} {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a guard against a hang
		err := run(ctx, params{users: 1000, clicks: 10000, rules: 16, p: 2, kill: kill, seed: 7, rate: 20000}, io.Discard)
		cancel()
		if err != nil {
			t.Fatalf("kill=%d: %v", kill, err)
		}
	}
}

// Bad parameters are an error, not a panic.
func TestEnrichBadParams(t *testing.T) {
	if err := run(t.Context(), params{users: 0, clicks: 10, p: 1, rate: 1}, io.Discard); err == nil {
		t.Fatal("no error for 0 users")
	}
}
