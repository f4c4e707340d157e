package failpaths

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// jobTimeout bounds every job a test runs: a liveness bug (a job that
// never ends) fails its test with a message instead of hanging the run.
// No test here waits for it in the normal course.
const jobTimeout = time.Minute

// testCtx is the context for the jobs of test t.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeoutCause(t.Context(), jobTimeout,
		fmt.Errorf("test %s: still running after %v: a liveness bug", t.Name(), jobTimeout))
	t.Cleanup(cancel)
	return ctx
}
