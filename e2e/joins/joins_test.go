package joins_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
)

// event is a keyed, timestamped value of one side of a join.
type event struct{ Key, TS, V int64 }

var eventCodec = codec.Struct3(codec.Int64(), func(e event) int64 { return e.Key },
	codec.Int64(), func(e event) int64 { return e.TS },
	codec.Int64(), func(e event) int64 { return e.V },
	func(k, ts, v int64) event { return event{k, ts, v} })

// pair is a join result: the two values, and the timestamp it carried.
type pair struct{ L, R, TS int64 }

var pairCodec = codec.Struct3(codec.Int64(), func(p pair) int64 { return p.L },
	codec.Int64(), func(p pair) int64 { return p.R },
	codec.Int64(), func(p pair) int64 { return p.TS },
	func(l, r, ts int64) pair { return pair{l, r, ts} })

func (p pair) String() string { return fmt.Sprintf("%d %d %d", p.L, p.R, p.TS) }

// disorder is the bound of the events' out-of-orderness, and of the
// watermarks' (BoundedOutOfOrderness): no event is ever late, so the
// batch answers are exact whatever the timing.
const disorder = 20

// events returns n events over keys, timestamps step apart moved back by
// up to disorder-1 ms, values base+1.. .
func events(seed uint64, n, keys int, step, base int64) []event {
	r := rand.New(rand.NewPCG(seed, uint64(base)))
	evs := make([]event, n)
	for i := range evs {
		evs[i] = event{Key: int64(r.IntN(keys)), TS: int64(i)*step - r.Int64N(disorder), V: base + int64(i) + 1}
	}
	return evs
}

// batchInterval is the interval join of ls and rs by brute force.
func batchInterval(ls, rs []event, lo, hi int64) []pair {
	var out []pair
	for _, l := range ls {
		for _, r := range rs {
			if l.Key == r.Key && l.TS+lo <= r.TS && r.TS <= l.TS+hi {
				out = append(out, pair{l.V, r.V, max(l.TS, r.TS)})
			}
		}
	}
	return sortPairs(out)
}

func sortPairs(ps []pair) []pair {
	slices.SortFunc(ps, func(a, b pair) int {
		return cmp.Or(cmp.Compare(a.L, b.L), cmp.Compare(a.R, b.R), cmp.Compare(a.TS, b.TS))
	})
	return ps
}

// source says how a side reads its events: each subtask pauses for ever
// after pause values (0: never), the end of the input is held by release
// (nil: not held); opened (nil: none) is called whenever the job makes
// one of the side's readers (a killer's attemptStarted).
type source struct {
	pause   int
	paused  *atomic.Int64
	release func() error
	opened  func()
}

// side makes a timestamped source of evs; its values go through maybe
// first (a fault injector) when it is set.
func side(env *weir.Environment, name string, evs []event, src source, maybe func()) *weir.Stream[event] {
	s := weir.FromPollingReader(env, name, func(sub, par int) (weir.PollingReader[event], error) {
		if src.opened != nil {
			src.opened()
		}
		return newHeldReader(evs, sub, par, src.pause, src.paused, src.release), nil
	}).WithCodec(eventCodec).UID(name)
	if maybe != nil {
		s = weir.Map(s, func(e event) event {
			maybe()
			return e
		}).WithCodec(eventCodec).Name(name + " faults")
	}
	return weir.AssignTimestamps(s, weir.BoundedOutOfOrderness(disorder*time.Millisecond, func(e event) int64 { return e.TS }))
}

// intervalJob joins ls and rs in [lo, hi] ms; the results are pairs with
// the join's timestamp.
func intervalJob(env *weir.Environment, ls, rs []event, lo, hi int64, src source, maybe func()) *weir.Stream[pair] {
	l := weir.KeyBy(side(env, "left", ls, src, maybe), func(e event) int64 { return e.Key }, codec.Int64())
	r := weir.KeyBy(side(env, "right", rs, src, nil), func(e event) int64 { return e.Key }, codec.Int64())
	j := weir.IntervalJoin[pair](l, r).Between(time.Duration(lo)*time.Millisecond, time.Duration(hi)*time.Millisecond).
		Process(func(a, b event) pair { return pair{L: a.V, R: b.V} }).WithCodec(pairCodec).UID("join")
	return withTimestamp(j)
}

// withTimestamp sets each pair's TS to its stream timestamp.
func withTimestamp(s *weir.Stream[pair]) *weir.Stream[pair] {
	return weir.Process(weir.KeyBy(s, func(p pair) int64 { return p.L }, codec.Int64()),
		func() weir.KeyedProcessFunction[int64, pair, pair] {
			var rc *weir.RuntimeContext
			return weir.ProcessFunc(func(c *weir.RuntimeContext) error { rc = c; return nil },
				func(_ int64, p pair, out *weir.Collector[pair]) error {
					p.TS = rc.Timestamp()
					out.Emit(p)
					return nil
				})
		}).WithCodec(pairCodec).UID("stamp")
}

// The interval join matches the batch answer for bounds of every shape,
// with the pair's timestamp the larger of its two.
func TestIntervalJoinMatchesBatch(t *testing.T) {
	for _, b := range [][2]int64{{-30, 30}, {-50, -10}, {5, 40}, {0, 0}} {
		t.Run(fmt.Sprintf("between=%d,%d", b[0], b[1]), func(t *testing.T) {
			t.Parallel()
			ls, rs := events(1, 1500, 13, 2, 0), events(2, 1500, 13, 2, 100000)
			env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
				weir.WithAutoWatermarkInterval(5*time.Millisecond))
			got, _ := weir.Collect(intervalJob(env, ls, rs, b[0], b[1], source{}, nil))
			res, err := env.Execute(testCtx(t))
			require.NoError(t, err)
			require.Equal(t, batchInterval(ls, rs, b[0], b[1]), sortPairs(got.Values()))
			require.Zero(t, res.LeakedSegments)
		})
	}
}

func floorMod(a, b int64) int64 { return ((a % b) + b) % b }

// windowsOf returns, per key, the windows [start, end) the timestamps fall
// in: tumbling (size), sliding (size, slide) or session (gap size) over
// the timestamps of both sides.
func windowsOf(kind string, size, slide int64, tss []int64) [][2]int64 {
	var ws [][2]int64
	switch kind {
	case "tumbling":
		for _, ts := range tss {
			s := ts - floorMod(ts, size)
			ws = append(ws, [2]int64{s, s + size})
		}
	case "sliding":
		for _, ts := range tss {
			for s := ts - floorMod(ts, slide); s > ts-size; s -= slide {
				ws = append(ws, [2]int64{s, s + size})
			}
		}
	case "session":
		sorted := slices.Sorted(slices.Values(tss))
		for i := 0; i < len(sorted); {
			start, end := sorted[i], sorted[i]+size
			for i++; i < len(sorted) && sorted[i] <= end; i++ { // touching sessions merge
				end = max(end, sorted[i]+size)
			}
			ws = append(ws, [2]int64{start, end})
		}
	}
	slices.SortFunc(ws, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	return slices.Compact(ws)
}

// batchWindowJoin is the window join of ls and rs: every pair of a key
// and window, stamped with the window's last timestamp.
func batchWindowJoin(ls, rs []event, kind string, size, slide int64) []pair {
	var out []pair
	for _, g := range groupWindows(ls, rs, kind, size, slide) {
		for _, l := range g.ls {
			for _, r := range g.rs {
				out = append(out, pair{l.V, r.V, g.end - 1})
			}
		}
	}
	return sortPairs(out)
}

// batchCoGroup is the coGroup of ls and rs as coGroupSummary renders it.
func batchCoGroup(ls, rs []event, kind string, size, slide int64) []pair {
	var out []pair
	for _, g := range groupWindows(ls, rs, kind, size, slide) {
		out = append(out, coGroupSummary(g.key, g.ls, g.rs, g.end-1))
	}
	return sortPairs(out)
}

// coGroupSummary renders one coGroup call: the key and both sides'
// counts, the difference of their sums.
func coGroupSummary(key int64, ls, rs []event, ts int64) pair {
	d := int64(0)
	for _, l := range ls {
		d += l.V
	}
	for _, r := range rs {
		d -= r.V
	}
	return pair{L: key*1_000_000_000 + int64(len(ls))*10000 + int64(len(rs)), R: d, TS: ts}
}

type group struct {
	key, end int64
	ls, rs   []event
}

// groupWindows groups both sides by key and window.
func groupWindows(ls, rs []event, kind string, size, slide int64) []group {
	keys := map[int64][]int64{}
	for _, e := range append(slices.Clone(ls), rs...) {
		keys[e.Key] = append(keys[e.Key], e.TS)
	}
	var gs []group
	for k, tss := range keys {
		for _, w := range windowsOf(kind, size, slide, tss) {
			g := group{key: k, end: w[1]}
			for _, l := range ls {
				if l.Key == k && w[0] <= l.TS && l.TS < w[1] {
					g.ls = append(g.ls, l)
				}
			}
			for _, r := range rs {
				if r.Key == k && w[0] <= r.TS && r.TS < w[1] {
					g.rs = append(g.rs, r)
				}
			}
			gs = append(gs, g)
		}
	}
	return gs
}

func assignerOf(kind string, size, slide int64) weir.WindowAssigner {
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	switch kind {
	case "sliding":
		return weir.SlidingWindows(ms(size), ms(slide))
	case "session":
		return weir.SessionWindows(ms(size))
	}
	return weir.TumblingWindows(ms(size))
}

// windowJob window-joins (or coGroups) ls and rs.
func windowJob(env *weir.Environment, ls, rs []event, kind string, size, slide int64, coGroup bool, src source, maybe func()) *weir.Stream[pair] {
	l, r := side(env, "left", ls, src, maybe), side(env, "right", rs, src, nil)
	key := func(e event) int64 { return e.Key }
	var out *weir.Stream[pair]
	if coGroup {
		out = weir.CoGroup[int64, pair](l, r).Where(key).EqualTo(key).Window(assignerOf(kind, size, slide)).
			Apply(func(k int64, as, bs []event, out *weir.Collector[pair]) error {
				out.Emit(coGroupSummary(k, as, bs, 0))
				return nil
			})
	} else {
		out = weir.Join[int64, pair](l, r).Where(key).EqualTo(key).Window(assignerOf(kind, size, slide)).
			Apply(func(a, b event) pair { return pair{L: a.V, R: b.V} })
	}
	return withTimestamp(out.WithCodec(pairCodec).UID("join"))
}

var windowKinds = []struct {
	kind        string
	size, slide int64
}{{"tumbling", 50, 0}, {"sliding", 60, 20}, {"session", 15, 0}}

// The window join and the coGroup match the batch answer over every
// assigner: pairs (groups) of a key and window, stamped with the window's
// last timestamp.
func TestWindowJoinMatchesBatch(t *testing.T) {
	for _, wk := range windowKinds {
		for _, cg := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/cogroup=%v", wk.kind, cg), func(t *testing.T) {
				t.Parallel()
				ls, rs := events(3, 1200, 7, 3, 0), events(4, 900, 7, 4, 100000)
				env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
					weir.WithAutoWatermarkInterval(5*time.Millisecond))
				got, _ := weir.Collect(windowJob(env, ls, rs, wk.kind, wk.size, wk.slide, cg, source{}, nil))
				_, err := env.Execute(testCtx(t))
				require.NoError(t, err)
				want := batchWindowJoin(ls, rs, wk.kind, wk.size, wk.slide)
				if cg {
					want = batchCoGroup(ls, rs, wk.kind, wk.size, wk.slide)
				}
				require.NotEmpty(t, want)
				require.Equal(t, want, sortPairs(got.Values()))
			})
		}
	}
}

// With task kills, in-process and over TCP, aligned and unaligned, the
// joins are exactly their batch answers: the buffers (interval join) and
// windows (window join, coGroup) are keyed state restored from the
// checkpoints, the sources rewind, the checkpointed Collect sink keeps
// each result once; on the heap and the pebble backend.
func TestJoinsExactlyOnceUnderKills(t *testing.T) {
	// Every join in-process and over TCP, aligned and unaligned; the
	// window joins (slower: windows on pebble) split those between them.
	type run struct {
		op        string
		tcp       bool
		unaligned bool
		pebble    bool
	}
	runs := []run{{"interval", false, false, false}, {"interval", false, true, true}, {"interval", true, false, false}, {"interval", true, true, false},
		{"window", false, false, true}, {"window", true, true, false}, {"cogroup", false, true, false}, {"cogroup", true, false, true}}
	for _, rn := range runs {
		seed := uint64(time.Now().UnixNano())
		tr := transports[0]
		if rn.tcp {
			tr = transports[1]
		}
		op := rn.op
		t.Run(fmt.Sprintf("%s/%s/unaligned=%v/pebble=%v/seed=%d", op, tr.name, rn.unaligned, rn.pebble, seed), func(t *testing.T) {
			t.Parallel()
			n := 3000
			if op != "interval" {
				n = 1500
			}
			ls, rs := events(seed, n, 11, 2, 0), events(seed+1, n, 11, 2, 100000)
			k := newKiller(seed, 3, int64(n/5))
			opts := []weir.Option{tr.opt, weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
				weir.WithAutoWatermarkInterval(5 * time.Millisecond),
				weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, Unaligned: rn.unaligned, TolerableFailures: 10})}
			if rn.pebble {
				opts = append(opts, weir.WithStateBackend(weir.PebbleBackend(weir.PebbleOptions{Dir: t.TempDir(), MemTableSize: 1 << 20, BlockCacheSize: 1 << 20})))
			}
			env := weir.NewEnvironment(opts...)
			var out *weir.Stream[pair]
			var want []pair
			src := source{release: k.release, opened: k.attemptStarted}
			switch op {
			case "interval":
				out, want = intervalJob(env, ls, rs, -25, 15, src, k.maybe), batchInterval(ls, rs, -25, 15)
			case "window":
				out, want = windowJob(env, ls, rs, "sliding", 60, 20, false, src, k.maybe), batchWindowJoin(ls, rs, "sliding", 60, 20)
			default:
				out, want = windowJob(env, ls, rs, "session", 15, 0, true, src, k.maybe), batchCoGroup(ls, rs, "session", 15, 0)
			}
			got, _ := weir.Collect(out)
			res := k.run(t, env)
			require.Equal(t, want, sortPairs(got.Values()))
			require.Equal(t, len(k.at), k.fired())
			require.Equal(t, len(k.at), res.Restarts, "each failure fails an attempt of its own")
			require.Zero(t, res.LeakedSegments)
		})
	}
}

// A savepoint taken mid-input restores at another parallelism (keyed
// state moves by key group, the sources split their remaining input) and
// the final answer is the batch one: interval join (its buffers) and
// window join (its windows), from the heap backend to pebble.
func TestJoinsSavepointRescale(t *testing.T) {
	for _, op := range []string{"interval", "window"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			ls, rs := events(9, 1800, 11, 2, 0), events(10, 1800, 11, 2, 100000)
			var paused atomic.Int64
			build := func(p, pause int, opts ...weir.Option) (*weir.Environment, *weir.Collected[pair]) {
				env := weir.NewEnvironment(append([]weir.Option{weir.WithParallelism(p), weir.WithBufferTimeout(time.Millisecond),
					weir.WithAutoWatermarkInterval(5 * time.Millisecond),
					weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour})}, opts...)...)
				src := source{pause: pause, paused: &paused}
				var out *weir.Stream[pair]
				if op == "interval" {
					out = intervalJob(env, ls, rs, -25, 15, src, nil)
				} else {
					out = windowJob(env, ls, rs, "tumbling", 50, 0, false, src, nil)
				}
				got, sink := weir.Collect(out)
				sink.UID("collect")
				return env, got
			}
			// Every reader of both sides stops (waiting, not ending)
			// after a third of its share: the job is mid-input.
			env, _ := build(2, len(ls)/6)
			job, err := env.Start(testCtx(t))
			require.NoError(t, err)
			for paused.Load() < 4 {
				time.Sleep(time.Millisecond)
			}
			sp, err := job.StopWithSavepoint(testCtx(t), t.TempDir())
			require.NoError(t, err)
			_, err = job.Wait()
			require.NoError(t, err)

			env2, got := build(3, 0, weir.WithRestoreFrom(sp),
				weir.WithStateBackend(weir.PebbleBackend(weir.PebbleOptions{Dir: t.TempDir(), MemTableSize: 1 << 20, BlockCacheSize: 1 << 20})))
			_, err = env2.Execute(testCtx(t))
			require.NoError(t, err)
			want := batchInterval(ls, rs, -25, 15)
			if op == "window" {
				want = batchWindowJoin(ls, rs, "tumbling", 50, 0)
			}
			require.Equal(t, want, sortPairs(got.Values()))
		})
	}
}
