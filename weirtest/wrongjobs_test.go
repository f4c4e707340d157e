package weirtest_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/weirtest"
)

// The harness must catch known-wrong jobs within a few seeds, naming the
// seed that reproduces the failure. Only failures with restarts matter
// here, so the faults are task, snapshot and commit failures.
var failureKinds = weirtest.Of(weirtest.TaskFailure, weirtest.SnapshotFailure, weirtest.CommitFailure)

// mustCatch runs job and requires the harness to fail it within cfg.Seeds.
func mustCatch(t *testing.T, cfg weirtest.Config, job func(r *weirtest.R), check func(v *weirtest.Verdict) bool) {
	t.Helper()
	rep, err := weirtest.Check(testCtx(t), cfg, job)
	if rep != nil && len(rep.Seeds) > 0 {
		t.Logf("summary:\n%s", rep.Table())
	}
	if err == nil {
		t.Fatalf("the harness passed a wrong job over %d seeds", len(rep.Seeds))
	}
	bad := rep.Failed()
	if bad == nil || bad.Err != nil || bad.Verdict == nil {
		t.Fatalf("want a wrong verdict, got %v", err)
	}
	if !check(bad.Verdict) {
		t.Fatalf("verdict does not show the bug:\n%v", bad.Verdict)
	}
	t.Logf("caught at seed %d:\n%v", bad.Seed, err)
}

// store is the destination of a user's two-phase-commit sink.
type store struct {
	mu struct {
		sync.Mutex
		pending   map[int64][]int64
		committed []int64
		done      map[int64]bool
	}
	next atomic.Int64
}

func newStore() *store {
	s := &store{}
	s.mu.pending = map[int64][]int64{}
	s.mu.done = map[int64]bool{}
	return s
}

func (s *store) records() ([]weirtest.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := make([]weirtest.Record, len(s.mu.committed))
	for i, v := range s.mu.committed {
		rs[i] = weirtest.Record{Value: fmt.Sprint(v)}
	}
	return rs, nil
}

// committer writes into the store transactionally; leaky writes around
// the transaction (a bug).
type committer struct {
	s     *store
	leaky bool
	// twice: Commit is not idempotent (a bug): committing again appends
	// the transaction's values again.
	twice bool
}

func (c committer) Begin() (int64, error) { return c.s.next.Add(1), nil }

func (c committer) Write(txn int64, v int64) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.leaky {
		c.s.mu.committed = append(c.s.mu.committed, v)
		return nil
	}
	c.s.mu.pending[txn] = append(c.s.mu.pending[txn], v)
	return nil
}

func (committer) PreCommit(int64) error { return nil }

func (c committer) Commit(txn int64) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.twice {
		c.s.mu.committed = append(c.s.mu.committed, c.s.mu.pending[txn]...)
		return nil
	}
	if !c.s.mu.done[txn] {
		c.s.mu.done[txn] = true
		c.s.mu.committed = append(c.s.mu.committed, c.s.mu.pending[txn]...)
		delete(c.s.mu.pending, txn)
	}
	return nil
}

func (c committer) Abort(txn int64) error {
	c.s.mu.Lock()
	delete(c.s.mu.pending, txn)
	c.s.mu.Unlock()
	return nil
}

// storeJob writes 0..n-1 through a committer into a store the user's
// checker reads.
func storeJob(n int64, leaky bool) func(r *weirtest.R) {
	return storeJobWith(n, committer{leaky: leaky})
}

// storeJobWith writes through c, recorded, into a fresh store.
func storeJobWith(n int64, c committer) func(r *weirtest.R) {
	return func(r *weirtest.R) {
		env := r.Env(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond))
		s := newStore()
		src := weir.FromGenerator(env, n, func(i int64) int64 { return i }).WithCodec(codec.Int64())
		c := c
		c.s = s
		weirtest.TwoPhaseCommitSink(r, weir.Map(src, func(v int64) int64 { return v }).WithCodec(codec.Int64()), codec.Int64(),
			func(int, int) (weir.TwoPhaseCommitter[int64, int64], error) { return c, nil }, nil)
		r.Output("store", s.records)
	}
}

func TestCatchesSinkWritingOutsideItsTransaction(t *testing.T) {
	// The same sink written correctly passes.
	weirtest.Run(t, weirtest.Config{Seeds: 2, Kinds: failureKinds}, storeJob(5000, false))
	mustCatch(t, weirtest.Config{Seeds: 10, Kinds: failureKinds}, storeJob(5000, true),
		func(v *weirtest.Verdict) bool { return v.Duplicated > 0 })
}

// forgetfulReader is a source whose Seek ignores the position: after a
// restore it starts over (a bug).
type forgetfulReader struct {
	next, n, step int64
	forget        bool
}

func (r *forgetfulReader) Next() (int64, bool, error) {
	if r.next >= r.n {
		return 0, false, nil
	}
	v := r.next
	r.next += r.step
	return v, true, nil
}

func (r *forgetfulReader) Position() ([]byte, error) { return binary.AppendVarint(nil, r.next), nil }

func (r *forgetfulReader) Seek(pos []byte) error {
	v, k := binary.Varint(pos)
	if k <= 0 {
		return errors.New("bad position")
	}
	if !r.forget {
		r.next = v
	}
	return nil
}

func sourceJob(n int64, forget bool) func(r *weirtest.R) {
	return func(r *weirtest.R) {
		env := r.Env(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond))
		src := weir.FromReader(env, "numbers", func(sub, par int) (weir.SourceReader[int64], error) {
			return &forgetfulReader{next: int64(sub), n: n, step: int64(par), forget: forget}, nil
		}).WithCodec(codec.Int64())
		weirtest.Collect(r, weir.Map(src, func(v int64) int64 { return v * 3 }).WithCodec(codec.Int64()), nil)
	}
}

func TestCatchesSourceNotRestoringItsPosition(t *testing.T) {
	weirtest.Run(t, weirtest.Config{Seeds: 2, Kinds: failureKinds}, sourceJob(5000, false))
	mustCatch(t, weirtest.Config{Seeds: 10, Kinds: failureKinds}, sourceJob(5000, true),
		func(v *weirtest.Verdict) bool { return v.Duplicated > 0 || v.Lost > 0 })
}

// countJob counts values per key: in weir keyed state, or (a bug) in a Go
// map that survives restarts and so counts replayed values twice.
func countJob(n int64, goState bool) func(r *weirtest.R) {
	return func(r *weirtest.R) {
		env := r.Env(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond))
		src := weir.FromGenerator(env, n, func(i int64) [2]int64 { return [2]int64{i % 10, 1} }).WithCodec(pairCodec)
		var counts *weir.Stream[[2]int64]
		if goState {
			var mu sync.Mutex
			seen := map[int64]int64{}
			// One subtask, so the Go map needs no partitioning; the counts
			// it emits per key are 1, 2, … whatever the arrival order.
			counts = weir.Map(src.Rebalance(),
				func(v [2]int64) [2]int64 {
					mu.Lock()
					defer mu.Unlock()
					seen[v[0]] += v[1]
					return [2]int64{v[0], seen[v[0]]}
				}).WithCodec(pairCodec).Parallelism(1)
		} else {
			counts = weir.Reduce(weir.KeyBy(src, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
				func(a, b [2]int64) [2]int64 { return [2]int64{a[0], a[1] + b[1]} })
		}
		weirtest.Collect(r, counts, func(v [2]int64) string { return fmt.Sprint(v[0]) })
	}
}

func TestCatchesStateInAGoVariable(t *testing.T) {
	weirtest.Run(t, weirtest.Config{Seeds: 2, Kinds: failureKinds}, countJob(5000, false))
	mustCatch(t, weirtest.Config{Seeds: 10, Kinds: failureKinds}, countJob(5000, true),
		func(v *weirtest.Verdict) bool { return v.Unexpected > 0 || v.Lost > 0 })
}

// A commit whose acknowledgement is lost is committed again after the
// restore: a committer that is not idempotent duplicates.
func TestCatchesNonIdempotentCommit(t *testing.T) {
	mustCatch(t, weirtest.Config{Seeds: 10, Kinds: weirtest.Of(weirtest.CommitAckFailure)}, storeJobWith(5000, committer{twice: true}),
		func(v *weirtest.Verdict) bool { return v.Duplicated > 0 })
}
