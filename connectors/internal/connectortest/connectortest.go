// Package connectortest holds what the connectors' tests share: a bounded
// test context, a failure injector that kills a job's records at given
// counts (restores from checkpoints exercised), the wait for a canceled
// job, and an exactly-once comparison of outputs. Only tests import it.
package connectortest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// JobTimeout bounds every job of a test: a liveness bug fails the test
// with a message instead of hanging the run.
const JobTimeout = 2 * time.Minute

// Context is the test's context, canceled after JobTimeout with a cause
// naming the test.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeoutCause(t.Context(), JobTimeout,
		fmt.Errorf("test %s: still running after %v: a liveness bug", t.Name(), JobTimeout))
	t.Cleanup(cancel)
	return ctx
}

// Killer fails the records it sees at the given counts (over every
// subtask and attempt), each once; after the first, only once a new
// checkpoint completed since the previous failure, so that restores from
// checkpoints are exercised (a failure that is due waits for that
// checkpoint with every record slowed to 1 ms, so it always fires before
// the job ends). It slows the job a little so that checkpoints complete
// while it runs. A nil *Killer does nothing.
type Killer struct {
	// Job is the running job (set after Start): no failure before.
	Job atomic.Pointer[weir.Job]
	// At are the record counts to fail at, ascending.
	At []int64
	// OnRecord, if set, sees the count of every record.
	OnRecord func(n int64)

	seen, next, ckptAt atomic.Int64
}

// Check counts a record and panics (a task failure) at the next count of
// At once its conditions hold. Call it from a user function of the job.
func (k *Killer) Check() {
	if k == nil {
		return
	}
	c := k.seen.Add(1)
	if k.OnRecord != nil {
		k.OnRecord(c)
	}
	if c%10 == 0 {
		time.Sleep(200 * time.Microsecond)
	}
	i := k.next.Load()
	if int(i) >= len(k.At) || c < k.At[i] {
		return
	}
	j := k.Job.Load()
	if j == nil {
		return
	}
	done := int64(j.CheckpointStats().Completed)
	if i > 0 && done <= k.ckptAt.Load() {
		// Due, but no checkpoint completed since the last failure yet:
		// slow the records down until one does, so that the job cannot
		// end first (every failure fires, whatever the machine's load).
		time.Sleep(time.Millisecond)
		return
	}
	if k.next.CompareAndSwap(i, i+1) {
		k.ckptAt.Store(done)
		panic(fmt.Sprintf("injected failure %d at record %d", i, c))
	}
}

// Done is how many failures were injected.
func (k *Killer) Done() int { return int(k.next.Load()) }

// Completed reports whether the job has completed at least n checkpoints.
func (k *Killer) Completed(n int) bool {
	j := k.Job.Load()
	return j != nil && j.CheckpointStats().Completed >= n
}

// RequireCanceled waits for j, canceled (or about to be), and fails the
// test unless it returns context.Canceled within a minute.
func RequireCanceled(t testing.TB, j *weir.Job) {
	t.Helper()
	done := make(chan error, 1)
	go func() { _, err := j.Wait(); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the canceled job returned %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the job did not return within a minute of its cancellation")
	}
}

// RequireSame fails the test with what is missing and what is extra (the
// first few of each) unless got is want (both sorted).
func RequireSame(t testing.TB, want, got []string) {
	t.Helper()
	if slices.Equal(want, got) {
		return
	}
	w, g := map[string]int{}, map[string]int{}
	for _, v := range want {
		w[v]++
	}
	for _, v := range got {
		g[v]++
	}
	var missing, extra []string
	for v, n := range w {
		if g[v] < n {
			missing = append(missing, v)
		}
	}
	for v, n := range g {
		if w[v] < n {
			extra = append(extra, v)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	t.Fatalf("got %d, want %d: %d missing (%v), %d extra or duplicated (%v)",
		len(got), len(want), len(missing), missing[:min(10, len(missing))], len(extra), extra[:min(10, len(extra))])
}
