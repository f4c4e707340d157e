// Command sessions finds the browsing sessions of many users in a stream
// of click events: event time, bounded out-of-orderness watermarks,
// session windows per user, and a source subtask that goes idle halfway
// (its idleness keeps the sessions of the others firing). It prints a
// summary and verifies every session against a batch computation of the
// same input; -kill N injects N task failures, and the result must still
// be exact.
//
//	go run ./examples/sessions
//	go run ./examples/sessions -kill 3
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
)

// click is one page view of a user at an event time (ms).
type click struct {
	User int64
	TS   int64
	Page int64
}

var clickCodec = codec.Struct3(codec.Int64(), func(c click) int64 { return c.User },
	codec.Int64(), func(c click) int64 { return c.TS },
	codec.Int64(), func(c click) int64 { return c.Page },
	func(u, ts, p int64) click { return click{u, ts, p} })

// session is one user's session: its window and its number of clicks.
type session struct {
	User, Start, End, Clicks int64
}

const (
	gap      = 30 * time.Second // a session ends after 30 s without a click
	disorder = 5 * time.Second  // clicks arrive up to 5 s out of order
)

type params struct {
	users, clicks, sources int
	kill                   int
	seed                   uint64
	rate                   float64
}

func main() {
	var p params
	flag.IntVar(&p.users, "users", 2000, "users")
	flag.IntVar(&p.clicks, "clicks", 300_000, "clicks in all")
	flag.IntVar(&p.sources, "p", 4, "source subtasks (and parallelism)")
	flag.IntVar(&p.kill, "kill", 0, "task failures to inject")
	flag.Uint64Var(&p.seed, "seed", 42, "input seed")
	flag.Float64Var(&p.rate, "rate", 200_000, "clicks per second (all sources)")
	flag.Parse()
	if err := run(context.Background(), p, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sessions:", err)
		os.Exit(1)
	}
}

// input returns each source subtask's clicks, in arrival order: each
// user's clicks come in bursts (sessions) separated by pauses longer than
// the gap, on the subtask the user belongs to, moved out of order by up
// to the disorder bound. The last subtask stops halfway through the time
// range: it then goes idle.
func input(p params) [][]click {
	r := rand.New(rand.NewPCG(p.seed, 9))
	per := make([][]click, p.sources)
	next := make([]int64, p.users) // each user's next click time
	for u := range next {
		next[u] = r.Int64N(int64(time.Minute / time.Millisecond))
	}
	var all []click
	for range p.clicks {
		u := r.IntN(p.users)
		t := next[u]
		if r.IntN(8) == 0 {
			t += int64(gap/time.Millisecond) + r.Int64N(int64(5*time.Minute/time.Millisecond)) // a pause: a new session
		} else {
			t += 1 + r.Int64N(int64(20*time.Second/time.Millisecond)) // within the session
		}
		next[u] = t
		all = append(all, click{User: int64(u), TS: t, Page: r.Int64N(100)})
	}
	slices.SortStableFunc(all, func(a, b click) int { return cmp.Compare(a.TS, b.TS) })
	half := all[len(all)/2].TS
	for _, c := range all {
		s := int(c.User) % p.sources
		if s == p.sources-1 && c.TS > half && p.sources > 1 {
			continue // the idle subtask: no clicks in the second half
		}
		// Arrival order: the event time moved back by up to the bound.
		per[s] = append(per[s], c)
	}
	for _, cs := range per {
		for i := range cs {
			j := i + r.IntN(8)
			if j < len(cs) && cs[j].TS-cs[i].TS < int64(disorder/time.Millisecond) {
				cs[i], cs[j] = cs[j], cs[i]
			}
		}
	}
	return per
}

// batch computes the sessions from the whole input: per user, sorted by
// time, a click more than the gap after the session's last one starts a
// new session (session windows are [first, last + gap)).
func batch(per [][]click) []session {
	byUser := map[int64][]int64{}
	for _, cs := range per {
		for _, c := range cs {
			byUser[c.User] = append(byUser[c.User], c.TS)
		}
	}
	g := int64(gap / time.Millisecond)
	var out []session
	for u, ts := range byUser {
		slices.Sort(ts)
		s := session{User: u, Start: ts[0], End: ts[0] + g}
		for _, t := range ts {
			if t > s.End {
				out = append(out, s)
				s = session{User: u, Start: t, End: t + g}
			}
			s.End = max(s.End, t+g)
			s.Clicks++
		}
		out = append(out, s)
	}
	return sortSessions(out)
}

func sortSessions(s []session) []session {
	slices.SortFunc(s, func(a, b session) int { return cmp.Or(cmp.Compare(a.User, b.User), cmp.Compare(a.Start, b.Start)) })
	return s
}

func run(ctx context.Context, p params, out *os.File) error {
	per := input(p)
	want := batch(per)
	sent := 0
	for _, cs := range per {
		sent += len(cs)
	}
	if sent < p.clicks {
		fmt.Fprintf(out, "%d clicks generated, %d sent: source subtask %d goes idle halfway, so the %d clicks of its users' second half are never sent\n",
			p.clicks, sent, p.sources-1, p.clicks-sent)
	}

	// Every other source has finished by the time the idle one ends: it
	// waits for them, as an endless, quiet partition would.
	var finished atomic.Int64
	env := weir.NewEnvironment(weir.WithParallelism(p.sources),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 100 * time.Millisecond, TolerableFailures: 100}),
		weir.WithRestartStrategy(weir.FixedDelayRestart(p.kill+3, 50*time.Millisecond)))
	src := weir.FromPollingReader(env, "clicks", func(sub, par int) (weir.PollingReader[click], error) {
		idle := sub == par-1 && par > 1
		return &clickReader{clicks: per[sub], idle: idle, limit: p.rate / float64(par),
			done: func(last bool) bool {
				if !last {
					finished.Add(1)
					return true
				}
				return finished.Load() >= int64(par-1)
			}}, nil
	}).WithCodec(clickCodec)

	var job atomic.Pointer[weir.Job]
	kills := killer(&job, p.kill, int64(p.clicks))
	faulty := weir.Map(src, kills).WithCodec(clickCodec).Name("failure injector")

	stamped := weir.AssignTimestamps(faulty, weir.BoundedOutOfOrderness(disorder, func(c click) int64 { return c.TS }).
		WithIdleness(500*time.Millisecond))
	perUser := weir.KeyBy(stamped, func(c click) int64 { return c.User }, codec.Int64())
	counts := weir.WindowAggregate(weir.Window(perUser, weir.SessionWindows(gap)), weir.AggregateFunction[click, int64, int64]{
		New:    func() int64 { return 0 },
		Add:    func(n int64, _ click) int64 { return n + 1 },
		Merge:  func(a, b int64) int64 { return a + b },
		Result: func(n int64) int64 { return n },
	}, nil)
	got, _ := weir.Collect(counts)

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
	var sessions []session
	for _, w := range got.Values() {
		sessions = append(sessions, session{User: w.Key, Start: w.Window.Start, End: w.Window.End, Clicks: w.Value})
	}
	sortSessions(sessions)
	summary(out, sessions, p)
	if err := verify(want, sessions); err != nil {
		return err
	}
	fmt.Fprintf(out, "verified: %d sessions of %d users equal the batch computation (%s, %s, %v)\n",
		len(want), p.users, count(res.Restarts, "restart"), count(res.Checkpoints.Completed, "checkpoint"), time.Since(start).Round(time.Millisecond))
	return nil
}

func summary(out *os.File, s []session, p params) {
	var clicks, dur int64
	longest := session{}
	for _, x := range s {
		clicks += x.Clicks
		dur += x.End - x.Start
		if x.End-x.Start > longest.End-longest.Start {
			longest = x
		}
	}
	if len(s) == 0 {
		return
	}
	fmt.Fprintf(out, "%d clicks of %d users in %d sessions: %.1f clicks and %v per session on average\n",
		clicks, p.users, len(s), float64(clicks)/float64(len(s)), (time.Duration(dur/int64(len(s))) * time.Millisecond).Round(time.Second))
	fmt.Fprintf(out, "longest: user %d, %v, %d clicks\n", longest.User,
		(time.Duration(longest.End-longest.Start) * time.Millisecond).Round(time.Second), longest.Clicks)
}

func verify(want, got []session) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d sessions, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			return fmt.Errorf("session %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	return nil
}

// killer returns a map function that fails its task kills times, each at
// a random record once a checkpoint completed since the previous failure.
func killer(job *atomic.Pointer[weir.Job], kills int, clicks int64) func(click) click {
	var seen, fired, completedAt atomic.Int64
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var at []int64
	for i := 1; i <= kills; i++ {
		at = append(at, int64(i)*clicks/int64(kills+2)+r.Int64N(clicks/int64(4*(kills+2))+1))
	}
	return func(c click) click {
		n := seen.Add(1)
		k := fired.Load()
		if int(k) >= len(at) || n < at[k] {
			return c
		}
		j := job.Load()
		if j == nil {
			return c
		}
		if done := int64(j.CheckpointStats().Completed); done > completedAt.Load() && fired.CompareAndSwap(k, k+1) {
			completedAt.Store(done)
			panic(fmt.Sprintf("injected failure %d of %d", k+1, len(at)))
		}
		return c
	}
}

// clickReader replays one subtask's clicks at a limited rate, from a
// checkpointed position. An idle reader waits, after its clicks, until the
// other subtasks finished.
type clickReader struct {
	clicks []click
	i      int
	idle   bool
	limit  float64 // clicks per second
	start  time.Time
	sent   int
	done   func(last bool) bool
	ended  bool
	timer  *time.Timer
	ready  chan struct{}
}

func (r *clickReader) Poll() (click, weir.ReadStatus, error) {
	now := time.Now()
	if r.start.IsZero() {
		r.start = now
	}
	if r.i >= len(r.clicks) {
		if !r.ended {
			r.ended = true
			if !r.idle {
				r.done(false)
				return click{}, weir.EndOfInput, nil
			}
		}
		if r.done(true) {
			return click{}, weir.EndOfInput, nil
		}
		return click{}, weir.NothingAvailable, nil
	}
	if float64(r.sent) >= now.Sub(r.start).Seconds()*r.limit {
		return click{}, weir.NothingAvailable, nil
	}
	c := r.clicks[r.i]
	r.i++
	r.sent++
	return c, weir.Read, nil
}

func (r *clickReader) Available() <-chan struct{} {
	d := 5 * time.Millisecond
	if r.ready == nil {
		r.ready = make(chan struct{}, 1)
		r.timer = time.AfterFunc(d, func() {
			select {
			case r.ready <- struct{}{}:
			default:
			}
		})
	} else {
		r.timer.Reset(d)
	}
	return r.ready
}

func (r *clickReader) Close() error {
	if r.timer != nil {
		r.timer.Stop()
	}
	return nil
}

func (r *clickReader) Position() ([]byte, error) { return codec.Int64().Append(nil, int64(r.i)), nil }

func (r *clickReader) Seek(pos []byte) error {
	i, err := codec.Int64().Decode(pos)
	if err != nil {
		return err
	}
	if i < 0 || i > int64(len(r.clicks)) {
		return errors.New("position out of range")
	}
	r.i = int(i)
	return nil
}

// count is n and word, in the plural unless n is 1 ("1 restart", "2
// restarts").
func count[N int | int64](n N, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
