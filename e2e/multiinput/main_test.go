package multiinput_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// jobTimeout bounds every job of these tests: a job still running then is
// a liveness bug, not a slow machine.
const jobTimeout = 3 * time.Minute

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeoutCause(t.Context(), jobTimeout,
		fmt.Errorf("test %s: still running after %v: a liveness bug", t.Name(), jobTimeout))
	t.Cleanup(cancel)
	return ctx
}
