package weir_test

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// jobTimeout bounds every job a test runs, well below the package's test
// timeout: a liveness bug fails one test with a message instead of
// hanging the whole run.
const jobTimeout = 2 * time.Minute

// testCtx is the context for the jobs of test t.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeoutCause(t.Context(), jobTimeout,
		fmt.Errorf("test %s: still running after %v: a liveness bug", t.Name(), jobTimeout))
	t.Cleanup(cancel)
	return ctx
}
