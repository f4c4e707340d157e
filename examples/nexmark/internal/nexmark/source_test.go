package nexmark

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// encoded returns the events' encodings, sorted: the stream as a
// multiset.
func encoded(es []Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = string(EventCodec{}.Append(nil, e))
	}
	slices.Sort(out)
	return out
}

func want(t *testing.T, cfg Config, n int64) []string {
	g := mustNew(t, cfg)
	es := make([]Event, n)
	for i := range n {
		es[i] = g.Event(i)
	}
	return encoded(es)
}

// sourceJob builds a job that collects the source's events; after is
// called with every event.
func sourceJob(t *testing.T, cfg SourceConfig, p int, after func(), opts ...weir.Option) (*weir.Environment, *weir.Collected[Event]) {
	env := weir.NewEnvironment(append([]weir.Option{weir.WithParallelism(p),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: filepath.Join(t.TempDir(), "chk")})}, opts...)...)
	src, err := Source(env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	seen := weir.Map(src, func(e Event) Event {
		after()
		return e
	}).WithCodec(EventCodec{})
	got, _ := weir.Collect(seen)
	return env, got
}

// The source makes the generator's events exactly once at every
// parallelism, and its watermarks never make one late (the windows of
// the queries see them all, see the queries' tests).
func TestSourceParallelism(t *testing.T) {
	cfg := SourceConfig{Generator: Config{Seed: 11, Rate: 1000, OutOfOrderGroupSize: 100}, Events: 5000}
	w := want(t, cfg.Generator, cfg.Events)
	for _, p := range []int{1, 2, 3} {
		env, got := sourceJob(t, cfg, p, func() {})
		if _, err := env.Execute(t.Context()); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(encoded(got.Values()), w) {
			t.Fatalf("p=%d: %d events, not the generator's %d", p, len(got.Values()), len(w))
		}
	}
}

// A job stopped with a savepoint at parallelism 2 and restored at 3 makes
// every event exactly once.
func TestSourceRescale(t *testing.T) {
	cfg := SourceConfig{Generator: Config{Seed: 12, Rate: 1000}, Events: 6000, Limit: 20000}
	w := want(t, cfg.Generator, cfg.Events)
	var seen atomic.Int64
	var once sync.Once
	reached := make(chan struct{})
	env, _ := sourceJob(t, cfg, 2, func() {
		if seen.Add(1) == 1500 {
			once.Do(func() { close(reached) })
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	job, err := env.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-reached:
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	sp, err := job.StopWithSavepoint(ctx, filepath.Join(t.TempDir(), "sp"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := job.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := seen.Load(); n >= cfg.Events {
		t.Fatalf("the first job made all %d events before its savepoint", n)
	}
	cfg.Limit = 0
	env2, got := sourceJob(t, cfg, 3, func() {}, weir.WithRestoreFrom(sp))
	if _, err := env2.Execute(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(encoded(got.Values()), w) {
		t.Fatalf("%d events after the rescale, not the generator's %d", len(got.Values()), len(w))
	}
}

// Positions round-trip, and a corrupt one is an error.
func TestReaderPosition(t *testing.T) {
	g := mustNew(t, Config{Rate: 10})
	r := &Reader{gen: g, n: 100, ps: []progression{{3, 4}, {10, 8}}}
	pos, err := r.Position()
	if err != nil {
		t.Fatal(err)
	}
	r2 := &Reader{gen: g, n: 100}
	if err := r2.Seek(pos); err != nil || !slices.Equal(r2.ps, r.ps) {
		t.Fatalf("seek: %v, %v", r2.ps, err)
	}
	for k := range len(pos) {
		if err := r2.Seek(pos[:k]); err == nil {
			t.Fatalf("position truncated to %d bytes: no error", k)
		}
	}
	if err := r2.Seek([]byte{1, 2, 0}); err == nil {
		t.Fatal("a zero step: no error")
	}
	// Rescaled readers read the rest exactly once, each in increasing
	// event number.
	var all []int64
	for sub := range 5 {
		rr := &Reader{gen: g, n: 100}
		if err := rr.Rescale([][]byte{pos, {0}}, sub, 5); err != nil {
			t.Fatal(err)
		}
		prev := int64(-1)
		for _, p := range rr.ps {
			for n := p.next; n < 100; n += p.step {
				all = append(all, n)
			}
		}
		for {
			e, st, err := rr.Poll()
			if err != nil || st != weir.Read {
				break
			}
			if e.DateTime() < prev {
				t.Fatalf("subtask %d out of order", sub)
			}
			prev = e.DateTime()
		}
	}
	slices.Sort(all)
	var w []int64
	for n := int64(3); n < 100; n += 4 {
		w = append(w, n)
	}
	for n := int64(10); n < 100; n += 8 {
		w = append(w, n)
	}
	slices.Sort(w)
	if !slices.Equal(all, w) {
		t.Fatalf("rescaled: %v, want %v", all, w)
	}
}
