package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"iter"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/examples/nexmark/internal/batch"
	"github.com/weirstream/weir/examples/nexmark/internal/nexmark"
	"github.com/weirstream/weir/examples/nexmark/internal/queries"
	"github.com/weirstream/weir/internal/cputime"
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
type query[R comparable] struct {
	name  string
	build func(*weir.Stream[nexmark.Event]) *weir.Stream[R]
	batch func(iter.Seq[nexmark.Event]) []R
	// check compares the streaming rows with the batch rows (nil: the
	// same multiset of rows).
	check func(got, want []R) error
}

var (
	queryOrder = []string{"q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q9", "q11"}
	queryList  = map[string]func(context.Context, params) (figures, error){
		"q0":  query[queries.Q0Row]{name: "q0", build: queries.Q0, batch: batch.Q0}.run,
		"q1":  query[queries.Q1Row]{name: "q1", build: queries.Q1, batch: batch.Q1}.run,
		"q2":  query[queries.Q2Row]{name: "q2", build: queries.Q2, batch: batch.Q2}.run,
		"q3":  query[queries.Q3Row]{name: "q3", build: queries.Q3, batch: batch.Q3}.run,
		"q4":  query[queries.Q4Row]{name: "q4", build: queries.Q4, batch: batch.Q4, check: checkQ4}.run,
		"q5":  query[queries.Q5Row]{name: "q5", build: queries.Q5, batch: batch.Q5}.run,
		"q7":  query[queries.Q7Row]{name: "q7", build: queries.Q7, batch: batch.Q7}.run,
		"q8":  query[queries.Q8Row]{name: "q8", build: queries.Q8, batch: batch.Q8}.run,
		"q9":  query[queries.Q9Row]{name: "q9", build: queries.Q9, batch: batch.Q9, check: checkQ9}.run,
		"q11": query[queries.Q11Row]{name: "q11", build: queries.Q11, batch: batch.Q11}.run,
	}
)

// checkQ4 checks q4's updates: per category, in the order they came
// (one subtask emits all of a category's), the last is the batch answer
// and each differs from the one before.
func checkQ4(got, want []queries.Q4Row) error {
	last := map[int64]queries.Q4Row{}
	for i, r := range got {
		if prev, ok := last[r.ID]; ok && prev == r {
			return fmt.Errorf("row %d: category %d updated to its own value %d", i, r.ID, r.Final)
		}
		last[r.ID] = r
	}
	if len(last) != len(want) {
		return fmt.Errorf("%d categories, want %d", len(last), len(want))
	}
	for _, w := range want {
		if g, ok := last[w.ID]; !ok || g != w {
			return fmt.Errorf("category %d: last row %+v, want %+v", w.ID, g, w)
		}
	}
	return nil
}

// checkQ9 checks q9's updates, whatever their order: per auction, every
// row is a different bid dated within the auction's life, on the
// auction's own columns, and the best of them is the batch answer's
// winner.
func checkQ9(got, want []queries.Q9Row) error {
	wins := map[int64]queries.Q9Row{}
	for _, w := range want {
		wins[w.ID] = w
	}
	best := map[int64]queries.Q9Row{}
	seen := map[queries.Q9Row]bool{}
	for i, r := range got {
		w, ok := wins[r.ID]
		switch {
		case !ok:
			return fmt.Errorf("row %d: auction %d has no winner", i, r.ID)
		case seen[r]:
			return fmt.Errorf("row %d: %+v twice", i, r)
		case r.Auction != r.ID || r.BidDateTime < r.DateTime || r.BidDateTime > r.Expires:
			return fmt.Errorf("row %d: a bid outside its auction: %+v", i, r)
		case r.ItemName != w.ItemName || r.Expires != w.Expires || r.Seller != w.Seller || r.Extra != w.Extra:
			return fmt.Errorf("row %d: auction columns %+v, want those of %+v", i, r, w)
		}
		seen[r] = true
		if b, ok := best[r.ID]; !ok || queries.BetterBid(q9Bid(r), q9Bid(b)) {
			best[r.ID] = r
		}
	}
	if len(best) != len(wins) {
		return fmt.Errorf("%d auctions, want %d", len(best), len(wins))
	}
	for id, w := range wins {
		if g := best[id]; g != w {
			return fmt.Errorf("auction %d: best row %+v, want %+v", id, g, w)
		}
	}
	return nil
}

// q9Bid is the bid of a q9 row, as far as BetterBid ranks it (q9's rows
// carry no channel or url: rows that tie on the rest tie here too).
func q9Bid(r queries.Q9Row) nexmark.Bid {
	return nexmark.Bid{Auction: r.Auction, Bidder: r.Bidder, Price: r.Price, DateTime: r.BidDateTime, Extra: r.BidExtra}
}

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

// output is what a job collects of the query's rows: the rows, or
// their fingerprints (neither when it discards them).
type output[R comparable] struct {
	rows         *weir.Collected[R]
	fingerprints *weir.Collected[uint64]
	seed         maphash.Seed
}

// fingerprinted tells whether the job collects fingerprints of its rows
// rather than the rows: append-only queries do unless they dump their
// rows (a fingerprint is 8 bytes that the garbage collector does not
// scan, where a row is tens or hundreds).
func (q query[R]) fingerprinted(p params) bool { return q.check == nil && p.dump == "" }

// job builds the query's job: the source, the failure injector, the
// query, and a sink that collects the rows or their fingerprints (or
// discards them).
func (q query[R]) job(p params, dir string, jobp *atomic.Pointer[weir.Job], seed maphash.Seed, opts ...weir.Option) (*weir.Environment, output[R], error) {
	out := output[R]{seed: seed}
	env, err := environment(p, dir, opts...)
	if err != nil {
		return nil, out, err
	}
	events, err := nexmark.Source(env, nexmark.SourceConfig{Generator: p.generator(), Events: p.events, Limit: p.limit})
	if err != nil {
		return nil, out, err
	}
	if p.kill > 0 {
		events = weir.Map(events, killer(jobp, p.kill, p.events)).WithCodec(nexmark.EventCodec{}).Name("failure injector")
	}
	rows := q.build(events)
	switch {
	case !p.verify && p.dump == "":
		weir.Discard(rows)
	case q.fingerprinted(p):
		fps := weir.Map(rows, func(r R) uint64 { return maphash.Comparable(seed, r) }).WithCodec(codec.Uint64()).Name("fingerprints")
		var sink *weir.Sink
		out.fingerprints, sink = weir.Collect(fps)
		sink.UID("collect fingerprints")
	default:
		var sink *weir.Sink
		out.rows, sink = weir.Collect(rows)
		sink.UID("collect")
	}
	return env, out, nil
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
	seed := maphash.MakeSeed()
	env, got, err := q.job(p, dir, &jobp, seed)
	if err != nil {
		return f, err
	}
	runtime.GC()
	cpu0, start := cputime.Process(), time.Now()
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
		env, got, err = q.job(p2, dir, &jobp, seed, weir.WithRestoreFrom(sp))
		if err != nil {
			return f, err
		}
		if job, err = env.Start(ctx); err != nil {
			return f, err
		}
		jobp.Store(job)
	}
	res, err := job.Wait()
	f.wall, f.cpu = time.Since(start), cputime.Process()-cpu0
	if err != nil {
		return f, err
	}
	f.restarts = res.Restarts
	if p.kill > 0 {
		f.note = fmt.Sprintf("%d of %d injected failures, %d restarts, %d checkpoints", min(res.Restarts, p.kill), p.kill, res.Restarts, res.Checkpoints.Completed)
	}
	if got.rows == nil && got.fingerprints == nil {
		return f, nil
	}
	var rows []R
	var fps []uint64
	if got.rows != nil {
		rows = got.rows.Values()
		f.rows = len(rows)
	} else {
		fps = got.fingerprints.Values()
		f.rows = len(fps)
	}
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
	switch {
	case fps != nil:
		err = sameFingerprints(fps, want, seed)
	case q.check != nil:
		err = q.check(rows, want)
	default:
		err = sameRows(rows, want)
	}
	if err != nil {
		return f, fmt.Errorf("not verified: %w", err)
	}
	f.verified = true
	v := fmt.Sprintf("%d rows verified against the batch computation's %d", f.rows, len(want))
	if q.check != nil {
		// An updating query: many updates, one final result per key.
		v = fmt.Sprintf("%d updates verified against the batch computation's %d final results", f.rows, len(want))
	}
	if f.note != "" {
		v += "; " + f.note
	}
	f.note = v
	return f, nil
}

// sameFingerprints compares the fingerprints of the streaming rows with
// the batch rows', as multisets.
func sameFingerprints[R comparable](got []uint64, want []R, seed maphash.Seed) error {
	w := make([]uint64, len(want))
	for i, r := range want {
		w[i] = maphash.Comparable(seed, r)
	}
	slices.Sort(got)
	slices.Sort(w)
	if len(got) != len(w) {
		return fmt.Errorf("%d rows, want %d (-dump DIR writes them)", len(got), len(w))
	}
	for i := range w {
		if got[i] != w[i] {
			return fmt.Errorf("%d rows as the batch computation, but not the same ones (-dump DIR writes them)", len(w))
		}
	}
	return nil
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
