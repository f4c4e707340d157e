package join

import (
	"testing"

	"github.com/cockroachdb/datadriven"
)

// newIntervalScenario drives op=interval: the interval join core. It is
// not built yet (engineer join's part of issue 24): a file with
// op=interval fails, clearly, until it is.
func newIntervalScenario(t *testing.T, d *datadriven.TestData, _ *args) (scenario, string) {
	t.Helper()
	d.Fatalf(t, "op=interval: the interval join core is not implemented yet")
	return nil, ""
}
