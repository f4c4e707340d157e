package weir_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime"
)

// pairReader is a SplitReader of subtask 0: every millisecond it reads one
// record from split "ahead" (timestamp 1000+k) and one from split
// "behind" (timestamp k); split "empty" never has a record. Subtask 1 has
// no split at all. Once stop is closed it ends its input.
type pairReader struct {
	sub   int
	stop  <-chan struct{}
	k     int64
	half  bool // the "ahead" record of pair k went out
	next  time.Time
	timer *time.Timer
	ready chan struct{} // buffered(1)
	sent  *atomic.Int64
}

func (r *pairReader) Start(s *weir.Splits) error {
	if r.sub == 0 {
		s.Add("ahead")
		s.Add("behind")
		s.Add("empty")
	}
	return nil
}

func (r *pairReader) Poll() (weir.SplitRecord[event], weir.ReadStatus, error) {
	select {
	case <-r.stop:
		return weir.SplitRecord[event]{}, weir.EndOfInput, nil
	default:
	}
	if r.sub != 0 {
		return weir.SplitRecord[event]{}, weir.NothingAvailable, nil
	}
	r.sent.Add(1)
	if r.half {
		r.half = false
		r.k++
		return weir.SplitRecord[event]{Value: event{Key: r.k % 3, TS: r.k - 1, V: 1}, Split: "behind", Timestamp: r.k - 1}, weir.Read, nil
	}
	if now := time.Now(); now.Before(r.next) {
		r.sent.Add(-1)
		return weir.SplitRecord[event]{}, weir.NothingAvailable, nil
	} else {
		r.next = now.Add(time.Millisecond)
	}
	r.half = true
	return weir.SplitRecord[event]{Value: event{Key: r.k % 3, TS: 1000 + r.k, V: 1}, Split: "ahead", Timestamp: 1000 + r.k}, weir.Read, nil
}

func (r *pairReader) Available() <-chan struct{} {
	if r.sub != 0 {
		return r.stop
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

func (r *pairReader) Close() error {
	if r.timer != nil {
		r.timer.Stop()
	}
	return nil
}

// Per-split watermarks: split "behind" trails split "ahead" by a second of
// event time, yet none of its records is late (with one watermark for the
// subtask they would all be), the empty split turns idle and subtask 1,
// which has no split, is idle from the start, so windows fire while the
// source still runs.
func TestSplitSourcePerSplitWatermarks(t *testing.T) {
	ctx := testCtx(t)
	stop := make(chan struct{})
	var sent atomic.Int64
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
		weir.WithAutoWatermarkInterval(5*time.Millisecond))
	src := weir.FromSplitReader(env, "pairs", weir.BoundedOutOfOrderness[event](0, nil).WithIdleness(50*time.Millisecond),
		func(sub, par int) (weir.SplitReader[event], error) {
			return &pairReader{sub: sub, stop: stop, sent: &sent}, nil
		}).WithCodec(eventCodec)
	ws := weir.Window(weir.KeyBy(src, func(e event) int64 { return e.Key }, codec.Int64()), weir.TumblingWindows(20*time.Millisecond))
	sums := weir.WindowReduce(ws, func(acc, e event) event { acc.V += e.V; return acc })
	var lateN atomic.Int64
	weir.SinkFunc(ws.LateData(), func(event) error { lateN.Add(1); return nil })
	fired := make(chan struct{})
	var firedOnce atomic.Bool
	var total atomic.Int64
	weir.SinkFunc(sums, func(w weir.Windowed[int64, event]) error {
		total.Add(w.Value.V)
		if w.Window.End <= 1000 && firedOnce.CompareAndSwap(false, true) {
			close(fired) // a window of split "behind" fired
		}
		return nil
	}).Parallelism(1)
	job, err := env.Start(ctx)
	require.NoError(t, err)
	select {
	case <-fired:
	case <-ctx.Done():
		t.Fatal("no window fired: an empty split or a subtask without splits stalled event time")
	}
	close(stop)
	_, err = job.Wait()
	require.NoError(t, err)
	require.Zero(t, lateN.Load(), "records of the split behind were late")
	require.Equal(t, sent.Load(), total.Load())
}

// badSplitReader reads a record of a split it never added.
type badSplitReader struct{}

func (badSplitReader) Start(*weir.Splits) error { return nil }
func (badSplitReader) Poll() (weir.SplitRecord[int64], weir.ReadStatus, error) {
	return weir.SplitRecord[int64]{Value: 1, Split: "nowhere", Timestamp: eventtime.NoTimestamp}, weir.Read, nil
}
func (badSplitReader) Available() <-chan struct{} { return nil }

func TestSplitSourceErrors(t *testing.T) {
	ctx := testCtx(t)
	env := weir.NewEnvironment()
	weir.Discard(weir.FromSplitReader(env, "s", (*weir.WatermarkStrategy[int64])(nil),
		func(int, int) (weir.SplitReader[int64], error) { return badSplitReader{}, nil }))
	_, err := env.Execute(ctx)
	require.ErrorContains(t, err, "nil watermark strategy")

	env = weir.NewEnvironment()
	weir.Discard(weir.FromSplitReader(env, "s", weir.NoWatermarks[int64](nil),
		func(int, int) (weir.SplitReader[int64], error) { return badSplitReader{}, nil }))
	_, err = env.Execute(ctx)
	require.ErrorContains(t, err, `a record of split "nowhere", which the reader did not add`)
}

// Timestamps of a split source cross exchanges: the strategy's function
// decides over the reader's timestamps when it has one.
func TestSplitSourceTimestamps(t *testing.T) {
	for _, tc := range []struct {
		name     string
		strategy *weir.WatermarkStrategy[int64]
		want     map[int64]int64 // window start -> sum
	}{
		{"strategy", weir.NoWatermarks(func(v int64) int64 { return v * 10 }), map[int64]int64{0: 45, 100: 145}},
		{"reader", weir.NoWatermarks[int64](nil), map[int64]int64{0: 190}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := weir.NewEnvironment(weir.WithParallelism(2))
			src := weir.FromSplitReader(env, "s", tc.strategy,
				func(sub, par int) (weir.SplitReader[int64], error) { return &countReader{n: 20, sub: sub}, nil })
			ws := weir.Window(weir.KeyBy(src, func(int64) int64 { return 0 }, codec.Int64()), weir.TumblingWindows(100*time.Millisecond))
			got, _ := weir.Collect(weir.WindowReduce(ws, func(a, v int64) int64 { return a + v }))
			_, err := env.Execute(testCtx(t))
			require.NoError(t, err)
			sums := map[int64]int64{}
			for _, w := range got.Values() {
				sums[w.Window.Start] += w.Value
			}
			require.Equal(t, tc.want, sums)
		})
	}
}

// countReader of subtask 0 reads 0..n-1 from one split, with timestamp
// 7; other subtasks read nothing.
type countReader struct {
	i, n int64
	sub  int
}

func (r *countReader) Start(s *weir.Splits) error {
	if r.sub == 0 {
		s.Add("only")
	}
	return nil
}

func (r *countReader) Poll() (weir.SplitRecord[int64], weir.ReadStatus, error) {
	if r.i == r.n || r.sub != 0 {
		return weir.SplitRecord[int64]{}, weir.EndOfInput, nil
	}
	r.i++
	return weir.SplitRecord[int64]{Value: r.i - 1, Split: "only", Timestamp: 7}, weir.Read, nil
}
func (r *countReader) Available() <-chan struct{} { return nil }
