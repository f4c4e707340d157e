package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/nexmark/internal/batch"
	"github.com/weirstream/weir/examples/nexmark/internal/nexmark"
	"github.com/weirstream/weir/examples/nexmark/internal/queries"
)

// params are the command's flags.
type params struct {
	query      string
	events     int64
	p          int
	backend    string
	seed       uint64
	checkpoint time.Duration
	kill       int
	rate       int64
	limit      float64
	disorder   int64
	dump       string
	verify     bool

	// restore, when set, is called with the job's events stream's job
	// once it runs (tests: stop it with a savepoint); then the query runs
	// again from it at parallelism restoreP.
	savepoint func(*weir.Job) (string, error)
	restoreP  int
}

func (p params) generator() nexmark.Config {
	return nexmark.Config{Seed: p.seed, Rate: p.rate, OutOfOrderGroupSize: p.disorder}
}

// figures are one query run's results.
type figures struct {
	query    string
	p        params
	wall     time.Duration
	cpu      time.Duration
	restarts int
	verified bool
	rows     int
	note     string
}

func (f figures) String() string {
	perCore := 0.0
	if f.cpu > 0 {
		perCore = float64(f.p.events) / f.cpu.Seconds()
	}
	return fmt.Sprintf("nexmark %s backend=%s p=%d events=%d wall=%.2fs events/s=%.0f events/s/core=%.0f verified=%t",
		f.query, f.p.backend, f.p.p, f.p.events, f.wall.Seconds(), float64(f.p.events)/f.wall.Seconds(), perCore, f.verified)
}

// query is one query: how to build it, how to compute its answer in
// batch, and how to compare the two.
type query[R any] struct {
	name  string
	build func(*weir.Stream[nexmark.Event]) *weir.Stream[R]
	batch func(iter.Seq[nexmark.Event]) []R
	// check compares the streaming rows with the batch rows (nil: the
	// same multiset of rows).
	check func(got, want []R) error
}

var (
	queryOrder = []string{"q0", "q1", "q2"}
	queryList  = map[string]func(context.Context, params) (figures, error){
		"q0": query[queries.Q0Row]{name: "q0", build: queries.Q0, batch: batch.Q0}.run,
		"q1": query[queries.Q1Row]{name: "q1", build: queries.Q1, batch: batch.Q1}.run,
		"q2": query[queries.Q2Row]{name: "q2", build: queries.Q2, batch: batch.Q2}.run,
	}
)

// environment is the job's environment for p.
func environment(p params, dir string, opts ...weir.Option) (*weir.Environment, error) {
	var backend weir.StateBackend
	switch p.backend {
	case "heap":
		backend = weir.HeapBackend()
	case "pebble":
		backend = weir.PebbleBackend(weir.PebbleOptions{Dir: filepath.Join(dir, "pebble")})
	default:
		return nil, fmt.Errorf("unknown backend %q (heap, pebble)", p.backend)
	}
	return weir.NewEnvironment(append([]weir.Option{weir.WithParallelism(p.p), weir.WithStateBackend(backend),
		weir.WithJobID("nexmark-" + p.query),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: p.checkpoint, Dir: filepath.Join(dir, "checkpoints"), TolerableFailures: 100}),
		weir.WithRestartStrategy(weir.FixedDelayRestart(p.kill+3, 50*time.Millisecond))}, opts...)...), nil
}

// job builds the query's job: the source, the failure injector, the
// query, and a sink that collects the rows (or discards them).
func (q query[R]) job(p params, dir string, jobp *atomic.Pointer[weir.Job], opts ...weir.Option) (*weir.Environment, *weir.Collected[R], error) {
	env, err := environment(p, dir, opts...)
	if err != nil {
		return nil, nil, err
	}
	events, err := nexmark.Source(env, nexmark.SourceConfig{Generator: p.generator(), Events: p.events, Limit: p.limit})
	if err != nil {
		return nil, nil, err
	}
	if p.kill > 0 {
		events = weir.Map(events, killer(jobp, p.kill, p.events)).WithCodec(nexmark.EventCodec{}).Name("failure injector")
	}
	rows := q.build(events)
	if !p.verify && p.dump == "" {
		weir.Discard(rows)
		return env, nil, nil
	}
	got, sink := weir.Collect(rows)
	sink.UID("collect")
	return env, got, nil
}

func (q query[R]) run(ctx context.Context, p params) (figures, error) {
	p.query = q.name
	f := figures{query: q.name, p: p}
	dir, err := os.MkdirTemp("", "nexmark-")
	if err != nil {
		return f, err
	}
	defer os.RemoveAll(dir)
	var jobp atomic.Pointer[weir.Job]
	env, got, err := q.job(p, dir, &jobp)
	if err != nil {
		return f, err
	}
	runtime.GC()
	cpu0, start := cpuTime(), time.Now()
	job, err := env.Start(ctx)
	if err != nil {
		return f, err
	}
	jobp.Store(job)
	if p.savepoint != nil {
		sp, err := p.savepoint(job)
		if err != nil {
			job.Cancel()
			job.Wait()
			return f, err
		}
		if _, err := job.Wait(); err != nil {
			return f, err
		}
		p2 := p
		p2.p = p.restoreP
		env, got, err = q.job(p2, dir, &jobp, weir.WithRestoreFrom(sp))
		if err != nil {
			return f, err
		}
		if job, err = env.Start(ctx); err != nil {
			return f, err
		}
		jobp.Store(job)
	}
	res, err := job.Wait()
	f.wall, f.cpu = time.Since(start), cpuTime()-cpu0
	if err != nil {
		return f, err
	}
	f.restarts = res.Restarts
	if p.kill > 0 {
		f.note = fmt.Sprintf("%d of %d injected failures, %d restarts, %d checkpoints", min(res.Restarts, p.kill), p.kill, res.Restarts, res.Checkpoints.Completed)
	}
	if got == nil {
		return f, nil
	}
	rows := got.Values()
	f.rows = len(rows)
	if p.dump != "" {
		if err := dumpRows(filepath.Join(p.dump, q.name+".jsonl"), rows); err != nil {
			return f, err
		}
	}
	if !p.verify {
		return f, nil
	}
	g, err := nexmark.New(p.generator())
	if err != nil {
		return f, err
	}
	want := q.batch(batch.Events(g, p.events))
	check := q.check
	if check == nil {
		check = sameRows[R]
	}
	if err := check(rows, want); err != nil {
		return f, fmt.Errorf("not verified: %w", err)
	}
	f.verified = true
	if f.note == "" {
		f.note = fmt.Sprintf("%d rows equal the batch computation's", len(rows))
	} else {
		f.note = fmt.Sprintf("%d rows equal the batch computation's; %s", len(rows), f.note)
	}
	return f, nil
}

// sameRows compares two multisets of rows by their JSON encodings.
func sameRows[R any](got, want []R) error {
	g, w := jsonLines(got), jsonLines(want)
	slices.Sort(g)
	slices.Sort(w)
	for i := 0; i < len(g) || i < len(w); i++ {
		switch {
		case i >= len(g):
			return fmt.Errorf("%d rows, want %d: missing %s", len(g), len(w), w[i])
		case i >= len(w):
			return fmt.Errorf("%d rows, want %d: extra %s", len(g), len(w), g[i])
		case g[i] != w[i]:
			return fmt.Errorf("row %d of %d (sorted): got %s, want %s", i, len(w), g[i], w[i])
		}
	}
	return nil
}

func jsonLines[R any](rows []R) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		b, err := json.Marshal(r)
		if err != nil {
			panic(err) // the row types all marshal
		}
		out[i] = string(b)
	}
	return out
}

func dumpRows[R any](path string, rows []R) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// dumpEvents writes every event of p to DIR/events.jsonl, from the
// generator.
func dumpEvents(p params) error {
	g, err := nexmark.New(p.generator())
	if err != nil {
		return err
	}
	if err := os.MkdirAll(p.dump, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(p.dump, "events.jsonl"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for e := range batch.Events(g, p.events) {
		if err := enc.Encode(e); err != nil {
			f.Close()
			return err
		}
	}
	return errors.Join(w.Flush(), f.Close())
}

// killer returns a map function that fails its task kills times, each at
// an event after a checkpoint completed since the previous failure.
func killer(job *atomic.Pointer[weir.Job], kills int, events int64) func(nexmark.Event) nexmark.Event {
	var seen, fired, completedAt atomic.Int64
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var at []int64
	for i := 1; i <= kills; i++ {
		at = append(at, int64(i)*events/int64(kills+2)+r.Int64N(events/int64(4*(kills+2))+1))
	}
	return func(e nexmark.Event) nexmark.Event {
		n := seen.Add(1)
		k := fired.Load()
		if int(k) >= len(at) || n < at[k] {
			return e
		}
		j := job.Load()
		if j == nil {
			return e
		}
		if done := int64(j.CheckpointStats().Completed); done > completedAt.Load() && fired.CompareAndSwap(k, k+1) {
			completedAt.Store(done)
			panic(fmt.Sprintf("injected failure %d of %d", k+1, len(at)))
		}
		return e
	}
}
