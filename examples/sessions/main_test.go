package main

import (
	"context"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The example verifies its sessions against the batch computation, with
// and without injected failures (run returns an error on any mismatch).
func TestSessionsVerify(t *testing.T) {
	for _, kill := range []int{0, 2} {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a guard against a hang
		err := run(ctx, params{users: 300, clicks: 40000, sources: 3, kill: kill, seed: 7, rate: 40000}, os.Stdout)
		cancel()
		if err != nil {
			t.Fatalf("kill=%d: %v", kill, err)
		}
	}
}
