package join

import (
	"testing"

	"github.com/cockroachdb/datadriven"
)

// newBroadcastScenario drives op=broadcast.
func newBroadcastScenario(t *testing.T, d *datadriven.TestData, _ *args) (scenario, string) {
	t.Helper()
	d.Fatalf(t, "op=broadcast: the broadcast core is not implemented yet")
	return nil, ""
}
