package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The example verifies its own outputs (run returns an error on any
// difference from the batch answer), without and with failures. Without
// PostgreSQL binaries it runs the Parquet half alone, as the PostgreSQL
// tests skip; with CI=true (where .ci/run installs them) their absence
// fails the test.
func TestExampleVerifies(t *testing.T) {
	for _, kills := range []int{0, 3} {
		c := config{clicks: 10_000, users: 10, par: 2, kills: kills, seed: 1, dir: t.TempDir(),
			requirePostgres: os.Getenv("CI") == "true"}
		if err := run(c); err != nil {
			t.Fatalf("-kill %d: %v", kills, err)
		}
	}
}
