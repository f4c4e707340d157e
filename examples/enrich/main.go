// Command enrich joins a stream of clicks with the page views that led
// to them and enriches the pairs, with the operators of streams that
// meet:
//
//   - an interval join: each click (keyed by user) with the user's page
//     views of the 10 s of event time before it;
//   - broadcast state: a rule set, which changes while the job runs, gives
//     each page category its points from an event time on; each visit
//     waits in keyed state for its event-time timer, so that it gets the
//     rule in force at its time whatever the order the two streams arrive
//     in;
//   - async I/O: a lookup of the user's segment against an in-process
//     profile service with random latency, many calls in flight per
//     subtask.
//
// It prints a summary and verifies every enriched visit against a batch
// computation of the same input; -kill N injects N failures (a panic
// upstream of the join, and the profile service failing a lookup), and
// the result must still be exact.
//
//	go run ./examples/enrich
//	go run ./examples/enrich -kill 3
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
)

// click is a click of a user at an event time (ms); view is a page view.
// Both streams' event times rise by generator index: click i is at
// i*step, view j at j*step + step/2.
type click struct{ User, TS int64 }

type view struct{ User, TS, Page int64 }

var clickCodec = codec.Struct2(codec.Int64(), func(c click) int64 { return c.User },
	codec.Int64(), func(c click) int64 { return c.TS },
	func(u, ts int64) click { return click{u, ts} })

var viewCodec = codec.Struct3(codec.Int64(), func(v view) int64 { return v.User },
	codec.Int64(), func(v view) int64 { return v.TS },
	codec.Int64(), func(v view) int64 { return v.Page },
	func(u, ts, p int64) view { return view{u, ts, p} })

// visit is a click joined with a view of the same user before it; scored
// is a visit with the points of its page's category at its click's time;
// enriched adds the user's segment.
type visit struct{ User, Click, View, Page int64 }

type scored struct{ User, Click, View, Points int64 }

type enriched struct {
	scored
	Segment string
}

var visitCodec = codec.Struct4(codec.Int64(), func(v visit) int64 { return v.User },
	codec.Int64(), func(v visit) int64 { return v.Click },
	codec.Int64(), func(v visit) int64 { return v.View },
	codec.Int64(), func(v visit) int64 { return v.Page },
	func(u, c, w, p int64) visit { return visit{u, c, w, p} })

var scoredCodec = codec.Struct4(codec.Int64(), func(s scored) int64 { return s.User },
	codec.Int64(), func(s scored) int64 { return s.Click },
	codec.Int64(), func(s scored) int64 { return s.View },
	codec.Int64(), func(s scored) int64 { return s.Points },
	func(u, c, w, p int64) scored { return scored{u, c, w, p} })

var enrichedCodec = codec.Struct2(scoredCodec, func(e enriched) scored { return e.scored },
	codec.String(), func(e enriched) string { return e.Segment },
	func(s scored, seg string) enriched { return enriched{s, seg} })

// rule gives category Category Points points from event time From on.
type rule struct{ From, Category, Points int64 }

var ruleCodec = codec.Struct3(codec.Int64(), func(r rule) int64 { return r.From },
	codec.Int64(), func(r rule) int64 { return r.Category },
	codec.Int64(), func(r rule) int64 { return r.Points },
	func(f, c, p int64) rule { return rule{f, c, p} })

// ruleKey names a rule in the broadcast state.
type ruleKey struct{ Category, From int64 }

var rules = weir.MapStateDescriptor[ruleKey, int64]{Name: "rules",
	KeyCodec: codec.Struct2(codec.Int64(), func(k ruleKey) int64 { return k.Category },
		codec.Int64(), func(k ruleKey) int64 { return k.From },
		func(c, f int64) ruleKey { return ruleKey{c, f} })}

const (
	step       = 10                   // ms of event time between two clicks (and two views)
	window     = 10 * time.Second     // a click joins the user's views of the 10 s before it
	categories = 8                    // page categories
	pages      = 200                  // pages, page%categories their category
	maxLatency = 2 * time.Millisecond // of the profile service
	lookupTime = 10 * time.Second     // a lookup's timeout
	// ckptEvery is the checkpoint interval. A machine that cannot keep
	// up with -rate takes fewer: the job is back-pressured, and an
	// aligned barrier reaches the scorer only behind the visits in
	// flight before it, which the scorer reads no faster than its
	// chained lookup frees places (a watermark fires a burst of visits
	// into the lookup's queue, whose overflow stops the scorer's input,
	// the rule side's barrier with it). On a loaded 2-core VM a run of
	// 3 to 5 s completed 2 to 4 checkpoints; with unaligned checkpoints,
	// the lookup in a task of its own (Rebalance) and 20-ms watermarks,
	// 10 in 3 s.
	ckptEvery = 100 * time.Millisecond
)

type params struct {
	users, clicks, rules, p int
	kill                    int
	seed                    uint64
	rate                    float64
}

func main() {
	var p params
	flag.IntVar(&p.users, "users", 1000, "users")
	flag.IntVar(&p.clicks, "clicks", 100_000, "clicks (and as many page views)")
	flag.IntVar(&p.rules, "rules", 64, "rule updates, spread over the run")
	flag.IntVar(&p.p, "p", 4, "parallelism")
	flag.IntVar(&p.kill, "kill", 0, "failures to inject")
	flag.Uint64Var(&p.seed, "seed", 42, "input seed")
	flag.Float64Var(&p.rate, "rate", 100_000, "clicks per second (and as many views)")
	flag.Parse()
	if err := run(context.Background(), p, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "enrich:", err)
		os.Exit(1)
	}
}

// input is the job's input, a pure function of the parameters: the
// generators' functions, and the batch computation, read it.
type input struct {
	p      params
	clicks []click
	views  []view
	rules  []rule
}

func newInput(p params) *input {
	r := rand.New(rand.NewPCG(p.seed, 24))
	in := &input{p: p, clicks: make([]click, p.clicks), views: make([]view, p.clicks)}
	for i := range in.clicks {
		in.clicks[i] = click{User: r.Int64N(int64(p.users)), TS: int64(i) * step}
		in.views[i] = view{User: r.Int64N(int64(p.users)), TS: int64(i)*step + step/2, Page: r.Int64N(pages)}
	}
	// Every category has points from time 0; then p.rules updates over
	// the event time of the input, in order of time.
	span := int64(p.clicks) * step
	for c := range int64(categories) {
		in.rules = append(in.rules, rule{From: 0, Category: c, Points: 1 + r.Int64N(10)})
	}
	for j := range int64(p.rules) {
		in.rules = append(in.rules, rule{From: (j + 1) * span / int64(p.rules+1), Category: r.Int64N(categories), Points: 1 + r.Int64N(10)})
	}
	return in
}

// segment is the user's segment, what the profile service knows.
func segment(user int64) string {
	return [...]string{"bronze", "silver", "gold"}[uint64(user)*0x9e3779b97f4a7c15>>32%3]
}

// pointsAt is the points of category c at ts by the rules, the latest one
// of c from at or before ts.
func pointsAt(rs []rule, c, ts int64) int64 {
	pts, from := int64(0), int64(-1)
	for _, r := range rs {
		if r.Category == c && r.From <= ts && r.From >= from {
			pts, from = r.Points, r.From
		}
	}
	return pts
}

// batch computes the enriched visits from the whole input.
func batch(in *input) []enriched {
	byUser := map[int64][]view{}
	for _, v := range in.views {
		byUser[v.User] = append(byUser[v.User], v)
	}
	w := window.Milliseconds()
	var out []enriched
	for _, c := range in.clicks {
		for _, v := range byUser[c.User] {
			if c.TS-w <= v.TS && v.TS <= c.TS {
				s := scored{User: c.User, Click: c.TS, View: v.TS, Points: pointsAt(in.rules, v.Page%categories, c.TS)}
				out = append(out, enriched{s, segment(c.User)})
			}
		}
	}
	return sortEnriched(out)
}

func sortEnriched(es []enriched) []enriched {
	slices.SortFunc(es, func(a, b enriched) int { return cmp.Or(cmp.Compare(a.Click, b.Click), cmp.Compare(a.View, b.View)) })
	return es
}

func run(ctx context.Context, p params, out io.Writer) error {
	if p.users < 1 || p.clicks < 1 || p.rules < 0 || p.p < 1 || p.kill < 0 || p.rate <= 0 {
		return fmt.Errorf("bad parameters %+v", p)
	}
	in := newInput(p)
	want := batch(in)

	env := weir.NewEnvironment(weir.WithParallelism(p.p),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: ckptEvery, TolerableFailures: 100}),
		weir.WithRestartStrategy(weir.FixedDelayRestart(p.kill+3, 50*time.Millisecond)))
	var job atomic.Pointer[weir.Job]
	kills := newKiller(&job, p.kill, 2*int64(p.clicks))

	// The clicks (through the failure injector) and the views, each with
	// rising timestamps per generator subtask, keyed by user.
	clicks := weir.FromGenerator(env, int64(p.clicks), func(i int64) click { return in.clicks[i] }, weir.Rate(p.rate)).
		WithCodec(clickCodec).Name("clicks").UID("clicks")
	clicks = weir.Map(clicks, func(c click) click {
		if kills.due() {
			panic("injected failure: a task dies")
		}
		return c
	}).WithCodec(clickCodec).Name("failure injector").UID("failure injector")
	views := weir.FromGenerator(env, int64(p.clicks), func(i int64) view { return in.views[i] }, weir.Rate(p.rate)).
		WithCodec(viewCodec).Name("views").UID("views")
	clicksByUser := weir.KeyBy(weir.AssignTimestamps(clicks, weir.MonotonousTimestamps(func(c click) int64 { return c.TS })),
		func(c click) int64 { return c.User }, codec.Int64())
	viewsByUser := weir.KeyBy(weir.AssignTimestamps(views, weir.MonotonousTimestamps(func(v view) int64 { return v.TS })),
		func(v view) int64 { return v.User }, codec.Int64())

	// Each click with the user's views of the window before it.
	visits := weir.IntervalJoin[visit](clicksByUser, viewsByUser).Between(-window, 0).
		Process(func(c click, v view) visit { return visit{User: c.User, Click: c.TS, View: v.TS, Page: v.Page} }).
		WithCodec(visitCodec).UID("join")

	// The rule updates arrive over about the run's duration: the rule set
	// changes while the job runs.
	runFor := float64(p.clicks) / p.rate
	ruleStream := weir.FromGenerator(env, int64(len(in.rules)), func(j int64) rule { return in.rules[j] },
		weir.Rate(float64(len(in.rules))/runFor)).WithCodec(ruleCodec).Parallelism(1).Name("rules").UID("rules")
	ruleStream = weir.AssignTimestamps(ruleStream, weir.MonotonousTimestamps(func(r rule) int64 { return r.From })).Parallelism(1)
	points := weir.KeyedBroadcastProcess(weir.KeyBy(visits, func(v visit) int64 { return v.User }, codec.Int64()),
		weir.Broadcast(ruleStream, rules),
		func() weir.KeyedBroadcastProcessFunction[int64, visit, rule, scored] { return &scorer{} }).
		WithCodec(scoredCodec).Name("score").UID("score")

	// The user's segment, from the profile service.
	svc := &profiles{fail: kills.due}
	out2 := weir.AsyncMap(points, func(ctx context.Context, s scored) (enriched, error) {
		seg, err := svc.Segment(ctx, s.User)
		return enriched{s, seg}, err
	}, weir.AsyncOptions{Capacity: 100, Timeout: lookupTime}).WithCodec(enrichedCodec).Name("profile lookup").UID("lookup")
	got, sink := weir.Collect(out2)
	sink.UID("collect")

	start := time.Now()
	j, err := env.Start(ctx)
	if err != nil {
		return err
	}
	job.Store(j)
	res, err := j.Wait()
	if err != nil {
		return err
	}
	es := sortEnriched(got.Values())
	summary(out, in, es, svc)
	if err := verify(want, es); err != nil {
		return err
	}
	if kills.fired() != p.kill {
		return fmt.Errorf("%d of %d failures fired", kills.fired(), p.kill)
	}
	fmt.Fprintf(out, "verified: %d enriched visits equal the batch computation (%d restarts, %d checkpoints, %v)\n",
		len(want), res.Restarts, res.Checkpoints.Completed, time.Since(start).Round(time.Millisecond))
	return nil
}

// scorer gives each visit the points of its page's category at the
// click's time. A visit waits in keyed state until the operator's
// watermark, the minimum of the visits' and the rules', reaches it: by
// then every rule from at or before it has arrived.
type scorer struct {
	rc      *weir.RuntimeContext
	rules   *weir.BroadcastMap[ruleKey, int64]
	pending *state.MapState[int64, []visit] // click time → the visits of the click
	// byCategory is the rules of each category sorted by From, rebuilt
	// from the broadcast state (the state is what is checkpointed).
	byCategory [][]ruleKey
}

func (s *scorer) Open(rc *weir.RuntimeContext) (err error) {
	s.rc = rc
	if s.rules, err = weir.GetBroadcastState(rc, rules); err != nil {
		return err
	}
	s.pending, err = weir.MapState(rc, "pending", codec.Int64(), codec.Slice(visitCodec))
	s.index()
	return err
}

// index rebuilds byCategory from the broadcast state.
func (s *scorer) index() {
	s.byCategory = make([][]ruleKey, categories)
	for k := range s.rules.All() {
		if k.Category >= 0 && k.Category < categories {
			s.byCategory[k.Category] = append(s.byCategory[k.Category], k)
		}
	}
	for _, ks := range s.byCategory {
		slices.SortFunc(ks, func(a, b ruleKey) int { return cmp.Compare(a.From, b.From) })
	}
}

func (s *scorer) ProcessElement(_ int64, v visit, _ *weir.Collector[scored]) error {
	vs, _, err := s.pending.Get(v.Click)
	if err != nil {
		return err
	}
	if err := s.pending.Put(v.Click, append(vs, v)); err != nil {
		return err
	}
	return s.rc.Timers().RegisterEventTimeTimer(v.Click)
}

func (s *scorer) ProcessBroadcastElement(r rule, _ *weir.BroadcastContext[int64], _ *weir.Collector[scored]) error {
	if r.Category < 0 || r.Category >= categories {
		return fmt.Errorf("a rule of category %d, outside 0..%d", r.Category, categories-1)
	}
	if err := s.rules.Put(ruleKey{r.Category, r.From}, r.Points); err != nil {
		return err
	}
	s.index()
	return nil
}

func (s *scorer) OnTimer(_, ts int64, _ weir.TimeDomain, out *weir.Collector[scored]) error {
	vs, _, err := s.pending.Get(ts)
	if err != nil {
		return err
	}
	for _, v := range vs {
		out.Emit(scored{User: v.User, Click: v.Click, View: v.View, Points: s.pointsAt(v.Page%categories, ts)})
	}
	return s.pending.Remove(ts)
}

func (s *scorer) pointsAt(c, ts int64) int64 {
	ks := s.byCategory[c]
	i, _ := slices.BinarySearchFunc(ks, ts+1, func(k ruleKey, t int64) int { return cmp.Compare(k.From, t) })
	if i == 0 {
		return 0
	}
	p, _ := s.rules.Get(ks[i-1])
	return p
}

// profiles is the in-process profile service: each lookup takes a random
// time up to maxLatency, and fails when fail says so.
type profiles struct {
	fail           func() bool
	calls, running atomic.Int64
	most           atomic.Int64
}

// errUnavailable is the failure the service injects.
var errUnavailable = errors.New("profile service unavailable (injected failure)")

// Segment looks the user's segment up.
func (p *profiles) Segment(ctx context.Context, user int64) (string, error) {
	p.calls.Add(1)
	r := p.running.Add(1)
	defer p.running.Add(-1)
	for m := p.most.Load(); r > m && !p.most.CompareAndSwap(m, r); m = p.most.Load() {
	}
	t := time.NewTimer(rand.N(maxLatency))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	if p.fail() {
		return "", errUnavailable
	}
	return segment(user), nil
}

func summary(out io.Writer, in *input, es []enriched, svc *profiles) {
	type agg struct{ visits, points int64 }
	by := map[string]agg{}
	users := map[int64]bool{}
	for _, e := range es {
		a := by[e.Segment]
		a.visits++
		a.points += e.Points
		by[e.Segment] = a
		users[e.User] = true
	}
	fmt.Fprintf(out, "%d clicks and %d page views of %d users: %d visits (a click with a view of the %v before it) of %d users; %d rules, %d of them arriving while the job ran\n",
		len(in.clicks), len(in.views), in.p.users, len(es), window, len(users), len(in.rules), in.p.rules)
	for _, seg := range []string{"gold", "silver", "bronze"} {
		a := by[seg]
		fmt.Fprintf(out, "  %-6s %7d visits %8d points\n", seg, a.visits, a.points)
	}
	fmt.Fprintf(out, "profile lookups: %d (the visits, and those repeated after failures), at most %d at once\n", svc.calls.Load(), svc.most.Load())
}

func verify(want, got []enriched) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d enriched visits, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			return fmt.Errorf("visit %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	return nil
}

// killer fires kills failures, each at a random one of the calls of due
// (from the failure injector and the profile service) once a checkpoint
// completed since the previous failure: each failure restores from a
// checkpoint.
type killer struct {
	job                     *atomic.Pointer[weir.Job]
	at                      []int64
	seen, next, completedAt atomic.Int64
}

func newKiller(job *atomic.Pointer[weir.Job], kills int, calls int64) *killer {
	k := &killer{job: job}
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for i := 1; i <= kills; i++ {
		k.at = append(k.at, int64(i)*calls/int64(kills+2)+r.Int64N(calls/int64(4*(kills+2))+1))
	}
	return k
}

// due reports whether the caller is to fail now.
func (k *killer) due() bool {
	c := k.seen.Add(1)
	n := k.next.Load()
	if int(n) >= len(k.at) || c < k.at[n] {
		return false
	}
	j := k.job.Load()
	if j == nil {
		return false
	}
	done := int64(j.CheckpointStats().Completed)
	if done > k.completedAt.Load() && k.next.CompareAndSwap(n, n+1) {
		k.completedAt.Store(done)
		return true
	}
	return false
}

func (k *killer) fired() int { return int(k.next.Load()) }
