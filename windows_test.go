package weir_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/state"
)

// event is a keyed, timestamped value of the window tests.
type event struct{ Key, TS, V int64 }

var eventCodec = codec.Struct3(codec.Int64(), func(e event) int64 { return e.Key },
	codec.Int64(), func(e event) int64 { return e.TS },
	codec.Int64(), func(e event) int64 { return e.V },
	func(k, ts, v int64) event { return event{k, ts, v} })

// outOfOrder returns n events over keys, timestamps step apart but each
// moved back by up to disorder-1 ms (bounded disorder), values 1..n.
func outOfOrder(seed uint64, n, keys int, step, disorder int64) []event {
	r := rand.New(rand.NewPCG(seed, 1))
	evs := make([]event, n)
	for i := range evs {
		evs[i] = event{Key: int64(r.IntN(keys)), TS: int64(i)*step - r.Int64N(disorder), V: int64(i + 1)}
	}
	return evs
}

// win is one window result: key, start, end, sum.
type win struct{ Key, Start, End, Sum int64 }

func sortWins(ws []win) []win {
	slices.SortFunc(ws, func(a, b win) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Start, b.Start), cmp.Compare(a.End, b.End))
	})
	return ws
}

func floorMod(a, b int64) int64 { return ((a % b) + b) % b }

// batchWindows computes, from the whole input, the window sums an
// exactly-once run must produce: tumbling (size), sliding (size, slide)
// or session (gap) windows.
func batchWindows(evs []event, kind string, size, slide int64) []win {
	sums := map[win]int64{}
	add := func(k, s, e, v int64) { sums[win{Key: k, Start: s, End: e}] += v }
	switch kind {
	case "tumbling":
		for _, e := range evs {
			s := e.TS - floorMod(e.TS, size)
			add(e.Key, s, s+size, e.V)
		}
	case "sliding":
		for _, e := range evs {
			for s := e.TS - floorMod(e.TS, slide); s > e.TS-size; s -= slide {
				add(e.Key, s, s+size, e.V)
			}
		}
	case "session":
		byKey := map[int64][]event{}
		for _, e := range evs {
			byKey[e.Key] = append(byKey[e.Key], e)
		}
		for k, es := range byKey {
			slices.SortFunc(es, func(a, b event) int { return cmp.Compare(a.TS, b.TS) })
			start, end, sum := es[0].TS, es[0].TS+size, int64(0)
			for _, e := range es {
				if e.TS > end { // sessions that touch merge
					add(k, start, end, sum)
					start, sum = e.TS, 0
				}
				end = max(end, e.TS+size)
				sum += e.V
			}
			add(k, start, end, sum)
		}
	}
	out := make([]win, 0, len(sums))
	for w, s := range sums {
		w.Sum = s
		out = append(out, w)
	}
	return sortWins(out)
}

func assigner(kind string, size, slide int64) weir.WindowAssigner {
	ms := func(x int64) time.Duration { return time.Duration(x) * time.Millisecond }
	switch kind {
	case "tumbling":
		return weir.TumblingWindows(ms(size))
	case "sliding":
		return weir.SlidingWindows(ms(size), ms(slide))
	}
	return weir.SessionWindows(ms(size))
}

// windowSums keys timestamped events and sums them per window.
func windowSums(s *weir.Stream[event], a weir.WindowAssigner) *weir.Stream[weir.Windowed[int64, event]] {
	keyed := weir.KeyBy(s, func(e event) int64 { return e.Key }, codec.Int64())
	return weir.WindowReduce(weir.Window(keyed, a), func(acc, e event) event { acc.V += e.V; return acc })
}

func collectedWins(vals []weir.Windowed[int64, event]) []win {
	out := make([]win, len(vals))
	for i, w := range vals {
		out[i] = win{Key: w.Key, Start: w.Window.Start, End: w.Window.End, Sum: w.Value.V}
	}
	return sortWins(out)
}

var windowKinds = []struct {
	kind        string
	size, slide int64
}{
	{"tumbling", 1000, 0},
	{"sliding", 2000, 500},
	{"session", 300, 0},
}

// Out-of-order input with bounded disorder gives exactly the windows a
// batch computation gives, for every assigner, transport and parallelism.
func TestWindowsMatchBatch(t *testing.T) {
	for _, wk := range windowKinds {
		for _, tr := range transports {
			for p := 1; p <= 4; p++ {
				t.Run(fmt.Sprintf("%s/%s/p=%d", wk.kind, tr.name, p), func(t *testing.T) {
					t.Parallel()
					evs := outOfOrder(uint64(p), 6000, 7, 3, 50)
					if wk.kind == "session" {
						// Gaps between bursts, so that sessions end.
						for i := range evs {
							evs[i].TS += int64(i/500) * 1000
						}
					}
					env := weir.NewEnvironment(tr.opt, weir.WithParallelism(p), weir.WithBufferTimeout(time.Millisecond))
					src := weir.FromSlice(env, evs).WithCodec(eventCodec)
					ts := weir.AssignTimestamps(src, weir.BoundedOutOfOrderness(50*time.Millisecond, func(e event) int64 { return e.TS }))
					got, _ := weir.Collect(windowSums(ts, assigner(wk.kind, wk.size, wk.slide)))
					_, err := env.Execute(testCtx(t))
					require.NoError(t, err)
					require.Equal(t, batchWindows(evs, wk.kind, wk.size, wk.slide), collectedWins(got.Values()))
				})
			}
		}
	}
}

// failAfterCheckpoint returns a map function that panics at the records
// of failAt once a checkpoint completed since the previous failure, and
// the function that reports whether every failure fired. While a failure
// is due and waits for its checkpoint, each record takes 200 µs, so that
// the source does not run out of records first on a loaded machine.
func failAfterCheckpoint(job *atomic.Pointer[weir.Job], failAt []int64) (func(event) event, func() bool) {
	var (
		seen, next  atomic.Int64
		completedAt atomic.Int64
	)
	f := func(e event) event {
		c := seen.Add(1)
		k := next.Load()
		if int(k) >= len(failAt) || c < failAt[k] {
			return e
		}
		j := job.Load()
		if j == nil {
			return e
		}
		done := int64(j.CheckpointStats().Completed)
		if done > completedAt.Load() && next.CompareAndSwap(k, k+1) {
			completedAt.Store(done)
			panic(fmt.Sprintf("injected failure %d at record %d", k, c))
		}
		time.Sleep(200 * time.Microsecond)
		return e
	}
	return f, func() bool { return int(next.Load()) >= len(failAt) }
}

// With task kills, the windows are still exactly the batch windows: the
// window contents and timers are restored from the checkpoints, the
// source rewinds, the checkpointed Collect sink keeps each result once.
func TestWindowsExactlyOnceUnderKills(t *testing.T) {
	for _, wk := range windowKinds {
		for _, tr := range transports {
			t.Run(wk.kind+"/"+tr.name, func(t *testing.T) {
				t.Parallel()
				evs := outOfOrder(7, 20000, 11, 2, 40)
				env := weir.NewEnvironment(tr.opt, weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
					weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, TolerableFailures: 10}),
					weir.WithAutoWatermarkInterval(5*time.Millisecond))
				var job atomic.Pointer[weir.Job]
				faulty, _ := failAfterCheckpoint(&job, []int64{3000, 9000, 15000})
				// Slow enough that checkpoints complete while windows are
				// open.
				src := weir.FromGenerator(env, int64(len(evs)), func(i int64) event { return evs[i] }, weir.Rate(60000)).WithCodec(eventCodec)
				ts := weir.AssignTimestamps(weir.Map(src, faulty).WithCodec(eventCodec),
					weir.BoundedOutOfOrderness(40*time.Millisecond, func(e event) int64 { return e.TS }))
				got, _ := weir.Collect(windowSums(ts, assigner(wk.kind, wk.size, wk.slide)))
				j, err := env.Start(testCtx(t))
				require.NoError(t, err)
				job.Store(j)
				res, err := j.Wait()
				require.NoError(t, err)
				require.Equal(t, batchWindows(evs, wk.kind, wk.size, wk.slide), collectedWins(got.Values()))
				require.GreaterOrEqual(t, res.Restarts, 1)
				require.Zero(t, res.LeakedSegments)
			})
		}
	}
}

// onEvent emits a watermark after every event (the highest timestamp
// seen, minus one): with one source subtask, which values are late is then
// decided by the input order alone.
type onEvent struct{ max int64 }

func (g *onEvent) OnEvent(ts int64, out eventtime.Output) {
	if ts > g.max {
		g.max = ts
		out.EmitWatermark(ts - 1)
	}
}

func (g *onEvent) OnPeriodicEmit(eventtime.Output) {}

// Late values beyond the allowed lateness go to the side output, each
// exactly once; values within it update and re-fire their window.
func TestLateDataSideOutput(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr weir.Option) {
		// One source subtask, watermarks on every event: lateness is
		// decided by the input order alone.
		var evs []event
		for i := int64(0); i < 100; i++ {
			evs = append(evs, event{Key: i % 2, TS: i * 100, V: 1})
		}
		// Watermark 9899 by now. Within the lateness (5 s) of its window
		// [6000,7000), cleaned up at 6999 + 5000:
		evs = append(evs, event{Key: 0, TS: 6500, V: 1000})
		// Beyond it (their windows were cleaned up):
		late := []event{{Key: 1, TS: 100, V: 7}, {Key: 0, TS: -20000, V: 9}}
		evs = append(evs, late...)
		env := weir.NewEnvironment(tr, weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond))
		src := weir.FromSlice(env, evs).WithCodec(eventCodec).Parallelism(1)
		ts := weir.AssignTimestamps(src, weir.CustomWatermarks(func(e event) int64 { return e.TS },
			func() eventtime.Generator { return &onEvent{max: math.MinInt64} })).Parallelism(1)
		keyed := weir.KeyBy(ts, func(e event) int64 { return e.Key }, codec.Int64())
		ws := weir.Window(keyed, weir.TumblingWindows(time.Second)).AllowedLateness(5 * time.Second)
		res := weir.WindowReduce(ws, func(a, e event) event { a.V += e.V; return a })
		gotLate, _ := weir.Collect(ws.LateData())
		got, _ := weir.Collect(res)
		_, err := env.Execute(testCtx(t))
		require.NoError(t, err)
		lateVals := gotLate.Values()
		slices.SortFunc(lateVals, func(a, b event) int { return cmp.Compare(a.TS, b.TS) })
		require.Equal(t, []event{late[1], late[0]}, lateVals)
		// Window [6000,7000) of key 0 fired at the watermark, then again
		// with the late value within the lateness.
		var firings []int64
		for _, w := range got.Values() {
			if w.Key == 0 && w.Window.Start == 6000 {
				firings = append(firings, w.Value.V)
			}
		}
		slices.Sort(firings)
		require.Equal(t, []int64{5, 1005}, firings)
	})
}

// An idle source subtask does not stall the windows downstream once the
// strategy marks it idle: windows fire while the job runs, although that
// subtask never sends a value.
func TestIdleSourceSubtaskDoesNotStallWindows(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr weir.Option) {
		ctx := testCtx(t)
		fired := make(chan weir.Windowed[int64, event], 1000)
		env := weir.NewEnvironment(tr, weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
			weir.WithAutoWatermarkInterval(5*time.Millisecond))
		// Subtask 0 produces a value every millisecond for ever; subtask 1
		// waits for values that never come.
		src := weir.FromPollingReader(env, "half idle", func(sub, par int) (weir.PollingReader[event], error) {
			return &tickReader{idle: sub == 1, step: time.Millisecond}, nil
		}).WithCodec(eventCodec)
		ts := weir.AssignTimestamps(src, weir.BoundedOutOfOrderness(0, func(e event) int64 { return e.TS }).WithIdleness(50*time.Millisecond))
		weir.SinkFunc(windowSums(ts, weir.TumblingWindows(20*time.Millisecond)), func(w weir.Windowed[int64, event]) error {
			select {
			case fired <- w:
			default:
			}
			return nil
		})
		job, err := env.Start(ctx)
		require.NoError(t, err)
		select {
		case w := <-fired:
			t.Logf("first window fired: %+v", w)
		case <-ctx.Done():
			t.Fatal("no window fired: the idle subtask stalled event time")
		}
		job.Cancel()
		_, err = job.Wait()
		require.ErrorIs(t, err, context.Canceled)
	})
}

// tickReader emits a value per step of processing time (timestamp: the
// time), or nothing at all when idle; it waits without blocking its task.
type tickReader struct {
	idle  bool
	step  time.Duration
	next  time.Time
	timer *time.Timer
	ready chan struct{}
}

func (r *tickReader) Poll() (event, weir.ReadStatus, error) {
	now := time.Now()
	if r.idle || now.Before(r.next) {
		return event{}, weir.NothingAvailable, nil
	}
	r.next = now.Add(r.step)
	return event{Key: now.UnixNano() % 5, TS: now.UnixMilli(), V: 1}, weir.Read, nil
}

func (r *tickReader) Available() <-chan struct{} {
	if r.idle {
		return nil // never
	}
	if r.ready == nil {
		r.ready = make(chan struct{}, 1)
		r.timer = time.AfterFunc(time.Until(r.next), func() {
			select {
			case r.ready <- struct{}{}:
			default:
			}
		})
	} else {
		r.timer.Reset(time.Until(r.next))
	}
	return r.ready
}

func (r *tickReader) Close() error {
	if r.timer != nil {
		r.timer.Stop()
	}
	return nil
}

// A savepoint taken while windows are open, restored at another
// parallelism, gives the same final windows as a run without it. The
// backends change across the savepoint for two of the kinds: the heap
// backend holds the int64 window keys by value, pebble serialized, and
// each restores the other's savepoint.
func TestWindowSavepointRescale(t *testing.T) {
	pebble := func(t *testing.T) weir.Option {
		return weir.WithStateBackend(weir.PebbleBackend(weir.PebbleOptions{Dir: t.TempDir(), MemTableSize: 1 << 20, BlockCacheSize: 1 << 20}))
	}
	heap := func(*testing.T) weir.Option { return weir.WithStateBackend(weir.HeapBackend()) }
	backends := [][2]func(*testing.T) weir.Option{{heap, pebble}, {pebble, heap}, {heap, heap}}
	for i, wk := range windowKinds {
		t.Run(wk.kind, func(t *testing.T) {
			before, after := backends[i%len(backends)][0](t), backends[i%len(backends)][1](t)
			evs := outOfOrder(11, 12000, 9, 2, 30)
			// pause > 0: every reader stops (waiting, not ending) after
			// pause values, so the first job is mid-input when it stops.
			build := func(p, pause int, paused *atomic.Int64, opts ...weir.Option) (*weir.Environment, *weir.Collected[weir.Windowed[int64, event]]) {
				env := weir.NewEnvironment(append([]weir.Option{weir.WithParallelism(p), weir.WithBufferTimeout(time.Millisecond),
					weir.WithAutoWatermarkInterval(5 * time.Millisecond),
					weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour})}, opts...)...)
				src := weir.FromPollingReader(env, "events", func(sub, par int) (weir.PollingReader[event], error) {
					return &sliceReader{evs: evs, ps: []progression{{int64(sub), int64(par)}}, pause: pause, paused: paused}, nil
				}).WithCodec(eventCodec).UID("source")
				ts := weir.AssignTimestamps(src, weir.BoundedOutOfOrderness(30*time.Millisecond, func(e event) int64 { return e.TS }))
				res := windowSums(ts, assigner(wk.kind, wk.size, wk.slide)).UID("windows")
				got, sink := weir.Collect(res)
				sink.UID("collect")
				return env, got
			}
			dir := t.TempDir()
			var paused atomic.Int64
			env, _ := build(2, len(evs)/6, &paused, before)
			job, err := env.Start(testCtx(t))
			require.NoError(t, err)
			for paused.Load() < 2 {
				time.Sleep(time.Millisecond)
			}
			sp, err := job.StopWithSavepoint(testCtx(t), dir)
			require.NoError(t, err)
			_, err = job.Wait()
			require.NoError(t, err)

			env2, got := build(3, 0, nil, weir.WithRestoreFrom(sp), after)
			_, err = env2.Execute(testCtx(t))
			require.NoError(t, err)
			require.Equal(t, batchWindows(evs, wk.kind, wk.size, wk.slide), collectedWins(got.Values()))
		})
	}
}

// progression is the indices next, next+step, …
type progression struct{ next, step int64 }

// sliceReader reads evs at the indices of its progressions, round robin;
// with pause > 0 it waits for ever after pause values. Its position (the
// progressions) is checkpointed, and a restore at another parallelism
// deals the old progressions out to the new readers.
type sliceReader struct {
	evs    []event
	ps     []progression
	cur    int
	read   int
	pause  int
	paused *atomic.Int64
}

func (r *sliceReader) Poll() (event, weir.ReadStatus, error) {
	if r.pause > 0 && r.read == r.pause {
		r.read++
		r.paused.Add(1)
	}
	if r.pause > 0 && r.read > r.pause {
		return event{}, weir.NothingAvailable, nil
	}
	for len(r.ps) > 0 {
		r.cur %= len(r.ps)
		p := &r.ps[r.cur]
		if p.next >= int64(len(r.evs)) {
			r.ps = slices.Delete(r.ps, r.cur, r.cur+1)
			continue
		}
		e := r.evs[p.next]
		p.next += p.step
		r.cur++
		r.read++
		return e, weir.Read, nil
	}
	return event{}, weir.EndOfInput, nil
}

func (r *sliceReader) Available() <-chan struct{} { return nil } // only when paused: never

func (r *sliceReader) Position() ([]byte, error) {
	var b []byte
	for _, p := range r.ps {
		b = codec.Int64().Append(codec.Int64().Append(b, p.next), p.step)
	}
	return b, nil
}

func decodeProgressions(pos []byte) ([]progression, error) {
	if len(pos)%16 != 0 {
		return nil, fmt.Errorf("position of %d bytes", len(pos))
	}
	var ps []progression
	for ; len(pos) > 0; pos = pos[16:] {
		n, _ := codec.Int64().Decode(pos[:8])
		s, _ := codec.Int64().Decode(pos[8:16])
		ps = append(ps, progression{n, s})
	}
	return ps, nil
}

func (r *sliceReader) Seek(pos []byte) (err error) {
	r.ps, err = decodeProgressions(pos)
	return err
}

func (r *sliceReader) Rescale(positions [][]byte, sub, par int) error {
	r.ps = nil
	k := 0
	for _, pos := range positions {
		ps, err := decodeProgressions(pos)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if k%par == sub {
				r.ps = append(r.ps, p)
			}
			k++
		}
	}
	return nil
}

// A source waiting for data keeps completing checkpoints; canceling the
// job returns promptly.
func TestWaitingSourceCheckpointsAndCancels(t *testing.T) {
	ch := make(chan int64)
	env := weir.NewEnvironment(weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond}))
	weir.Discard(weir.FromChannel(env, ch))
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)
	ch <- 1 // the job runs
	for job.CheckpointStats().Completed < 3 {
		time.Sleep(time.Millisecond)
	}
	job.Cancel()
	_, err = job.Wait()
	require.ErrorIs(t, err, context.Canceled)
}

// Keyed process functions get timers: event-time timers fire in
// timestamp order when the watermark reaches them, before the watermark
// goes on; one timer per key and timestamp.
func TestProcessFunctionEventTimers(t *testing.T) {
	forEachTransport(t, func(t *testing.T, tr weir.Option) {
		var evs []event
		for i := int64(0); i < 3000; i++ {
			evs = append(evs, event{Key: i % 10, TS: i, V: 1})
		}
		env := weir.NewEnvironment(tr, weir.WithParallelism(3), weir.WithBufferTimeout(time.Millisecond))
		// One source subtask with a watermark after every value: timers
		// fire as event time passes each second, while values flow.
		src := weir.FromSlice(env, evs).WithCodec(eventCodec).Parallelism(1)
		ts := weir.AssignTimestamps(src, weir.CustomWatermarks(func(e event) int64 { return e.TS },
			func() eventtime.Generator { return &onEvent{max: math.MinInt64} })).Parallelism(1)
		keyed := weir.KeyBy(ts, func(e event) int64 { return e.Key }, codec.Int64())
		out := weir.Process(keyed, func() weir.KeyedProcessFunction[int64, event, [3]int64] { return &countPerSecond{} })
		var mu sync.Mutex
		var fired [][3]int64 // in firing order
		weir.SinkFunc(out.WithCodec(codec.Func(appendInts3, decodeInts3)), func(v [3]int64) error {
			mu.Lock()
			fired = append(fired, v)
			mu.Unlock()
			return nil
		}).Parallelism(1) // one sink: the order of each key's timers is kept
		_, err := env.Execute(testCtx(t))
		require.NoError(t, err)
		// One timer per key and second (registered for each of the key's
		// values), at the second's end, in time order per key; every
		// value is counted once.
		require.Len(t, fired, 30)
		last := map[int64]int64{}
		total := map[int64]int64{}
		for _, v := range fired {
			key, ts, n := v[0], v[1], v[2]
			require.Equal(t, int64(999), ts%1000, "%v", v)
			require.Greater(t, ts, last[key]-1, "timers of key %d out of order: %v", key, fired)
			last[key] = ts + 1
			total[key] += n
		}
		for k := int64(0); k < 10; k++ {
			require.Equal(t, int64(300), total[k], "key %d", k)
		}
	})
}

// countPerSecond counts each key's values per second of event time and
// emits (key, timer, count) when the watermark passes the second.
type countPerSecond struct {
	count *state.ValueState[int64]
	rc    *weir.RuntimeContext
}

func (f *countPerSecond) Open(rc *weir.RuntimeContext) error {
	f.rc = rc
	var err error
	f.count, err = weir.ValueState(rc, "count", codec.Int64())
	return err
}

func (f *countPerSecond) ProcessElement(key int64, e event, out *weir.Collector[[3]int64]) error {
	n, err := f.count.Value()
	if err != nil {
		return err
	}
	if err := f.count.Update(n + 1); err != nil {
		return err
	}
	end := e.TS - floorMod(e.TS, 1000) + 999
	return f.rc.Timers().RegisterEventTimeTimer(end) // the same timer for the whole second
}

func (f *countPerSecond) OnTimer(key, ts int64, d weir.TimeDomain, out *weir.Collector[[3]int64]) error {
	n, err := f.count.Value()
	if err != nil {
		return err
	}
	out.Emit([3]int64{key, ts, n})
	return f.count.Clear()
}

func appendInts3(dst []byte, v [3]int64) []byte {
	for _, x := range v {
		dst = codec.Int64().Append(dst, x)
	}
	return dst
}

func decodeInts3(b []byte) ([3]int64, error) {
	var v [3]int64
	if len(b) != 24 {
		return v, fmt.Errorf("%d bytes", len(b))
	}
	for i := range v {
		v[i], _ = codec.Int64().Decode(b[8*i : 8*i+8])
	}
	return v, nil
}

// Bad window and watermark settings are errors from Execute that name the
// operator; so are event-time windows on a stream without timestamps.
func TestWindowConfigErrors(t *testing.T) {
	stamp := func(e event) int64 { return e.TS }
	for name, tc := range map[string]struct {
		build func(env *weir.Environment)
		want  string
	}{
		"zero size": {func(env *weir.Environment) {
			windowSums(stamped(env, stamp), weir.TumblingWindows(0))
		}, "window size"},
		"negative slide": {func(env *weir.Environment) {
			windowSums(stamped(env, stamp), weir.SlidingWindows(time.Second, -time.Second))
		}, "window slide"},
		"zero gap": {func(env *weir.Environment) {
			windowSums(stamped(env, stamp), weir.SessionWindows(0))
		}, "session gap"},
		"negative lateness": {func(env *weir.Environment) {
			keyed := weir.KeyBy(stamped(env, stamp), func(e event) int64 { return e.Key }, codec.Int64())
			weir.WindowReduce(weir.Window(keyed, weir.TumblingWindows(time.Second)).AllowedLateness(-time.Second),
				func(a, b event) event { return a })
		}, "allowed lateness"},
		"offset too large": {func(env *weir.Environment) {
			windowSums(stamped(env, stamp), weir.TumblingWindows(time.Second).WithOffset(2*time.Second))
		}, "offset"},
		"no timestamps": {func(env *weir.Environment) {
			windowSums(weir.FromSlice(env, []event{{}}).WithCodec(eventCodec), weir.TumblingWindows(time.Second))
		}, "without timestamps"},
		"nil strategy": {func(env *weir.Environment) {
			weir.AssignTimestamps[event](weir.FromSlice(env, []event{{}}), nil)
		}, "nil watermark strategy"},
		"nil timestamp function": {func(env *weir.Environment) {
			weir.AssignTimestamps(weir.FromSlice(env, []event{{}}), weir.MonotonousTimestamps[event](nil))
		}, "nil timestamp function"},
		"negative bound": {func(env *weir.Environment) {
			weir.AssignTimestamps(weir.FromSlice(env, []event{{}}), weir.BoundedOutOfOrderness(-time.Second, stamp))
		}, "bound"},
		"zero idleness": {func(env *weir.Environment) {
			weir.AssignTimestamps(weir.FromSlice(env, []event{{}}), weir.MonotonousTimestamps(stamp).WithIdleness(0))
		}, "idleness"},
		"late data before the function": {func(env *weir.Environment) {
			keyed := weir.KeyBy(stamped(env, stamp), func(e event) int64 { return e.Key }, codec.Int64())
			weir.Window(keyed, weir.TumblingWindows(time.Second)).LateData()
		}, "after the window function"},
	} {
		t.Run(name, func(t *testing.T) {
			env := weir.NewEnvironment()
			tc.build(env)
			_, err := env.Execute(testCtx(t))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func stamped(env *weir.Environment, stamp func(event) int64) *weir.Stream[event] {
	return weir.AssignTimestamps(weir.FromSlice(env, []event{{Key: 1, TS: 5}}).WithCodec(eventCodec), weir.MonotonousTimestamps(stamp))
}

// A timestamp function that panics fails its task like any user function;
// the job restarts per its strategy and, here, gives up.
func TestPanickingTimestampFunctionFailsTask(t *testing.T) {
	env := weir.NewEnvironment()
	src := weir.FromSlice(env, []event{{TS: 1}, {TS: 2}}).WithCodec(eventCodec)
	ts := weir.AssignTimestamps(src, weir.MonotonousTimestamps(func(e event) int64 {
		if e.TS == 2 {
			panic("bad timestamp")
		}
		return e.TS
	}))
	weir.Discard(windowSums(ts, weir.TumblingWindows(time.Second)))
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, "bad timestamp")
	require.ErrorContains(t, err, "timestamps/watermarks")
}

// A processing-time timer that came due while the job was down fires as
// soon as the job is restored from a savepoint. The test runs in a synctest
// bubble: processing time is virtual, and advances only while every
// goroutine of the job waits, so the timer (an hour after its key's value)
// cannot come due before the savepoint completes however slow the machine,
// and the hour the job is down passes at once. The savepoint is taken once
// the process function reports the timer set.
func TestProcessingTimerDueWhileDownFiresOnRestore(t *testing.T) {
	synctest.Test(t, testProcessingTimerDueWhileDownFiresOnRestore)
}

func testProcessingTimerDueWhileDownFiresOnRestore(t *testing.T) {
	dir := t.TempDir()
	ch := make(chan event, 1)
	set := make(chan int64, 1)
	fired := make(chan int64, 1)
	build := func(opts ...weir.Option) *weir.Environment {
		env := weir.NewEnvironment(append([]weir.Option{weir.WithCheckpointing(weir.CheckpointConfig{Interval: 24 * time.Hour})}, opts...)...)
		src := weir.FromChannel(env, ch).WithCodec(eventCodec).UID("channel")
		keyed := weir.KeyBy(src, func(e event) int64 { return e.Key }, codec.Int64())
		out := weir.Process(keyed, func() weir.KeyedProcessFunction[int64, event, int64] { return &remindLater{set: set} }).UID("remind")
		weir.SinkFunc(out, func(ts int64) error {
			select {
			case fired <- ts:
			default:
			}
			return nil
		})
		return env
	}
	job, err := build().Start(testCtx(t))
	require.NoError(t, err)
	ch <- event{Key: 1}
	var due int64
	select {
	case due = <-set:
	case <-testCtx(t).Done():
		t.Fatal("the timer was never set")
	}
	sp, err := job.StopWithSavepoint(testCtx(t), dir)
	require.NoError(t, err)
	_, err = job.Wait()
	require.NoError(t, err)
	select {
	case <-fired:
		t.Fatal("the timer fired before the job stopped")
	default:
	}
	require.Less(t, time.Now().UnixMilli(), due, "the job stopped before the timer was due")
	time.Sleep(remindAfter) // the timer comes due while no job runs
	require.GreaterOrEqual(t, time.Now().UnixMilli(), due)

	job, err = build(weir.WithRestoreFrom(sp)).Start(testCtx(t))
	require.NoError(t, err)
	select {
	case ts := <-fired:
		require.Equal(t, due, ts, "the restored timer")
	case <-testCtx(t).Done():
		job.Cancel()
		_, err := job.Wait()
		t.Fatalf("the restored timer did not fire (the job ended with %v)", err)
	}
	job.Cancel()
	_, err = job.Wait()
	require.ErrorIs(t, err, context.Canceled)
}

const remindAfter = time.Hour

// remindLater sets a processing-time timer remindAfter after each value
// and sends its time to set (if there is room); it emits the timer's time
// when it fires.
type remindLater struct {
	rc  *weir.RuntimeContext
	set chan<- int64
}

func (f *remindLater) Open(rc *weir.RuntimeContext) error { f.rc = rc; return nil }

func (f *remindLater) ProcessElement(_ int64, _ event, _ *weir.Collector[int64]) error {
	due := f.rc.Timers().CurrentProcessingTime() + remindAfter.Milliseconds()
	if err := f.rc.Timers().RegisterProcessingTimeTimer(due); err != nil {
		return err
	}
	select {
	case f.set <- due:
	default:
	}
	return nil
}

func (f *remindLater) OnTimer(_ int64, ts int64, _ weir.TimeDomain, out *weir.Collector[int64]) error {
	out.Emit(ts)
	return nil
}
