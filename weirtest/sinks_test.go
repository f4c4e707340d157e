package weirtest_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/weirtest"
)

// pipeline is a correct multi-stage job: map, keyed running sums, a
// filter, ending in the sink that sink attaches.
func pipeline(n int64, opts []weir.Option, sink func(r *weirtest.R, s *weir.Stream[[2]int64])) func(r *weirtest.R) {
	return func(r *weirtest.R) {
		env := r.Env(append([]weir.Option{weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond)}, opts...)...)
		src := weir.FromGenerator(env, n, func(i int64) int64 { return i }).WithCodec(codec.Int64()).UID("numbers")
		pairs := weir.Map(src, func(i int64) [2]int64 { return [2]int64{i % 10, i} }).WithCodec(pairCodec).UID("pairs")
		sums := weir.Reduce(weir.KeyBy(pairs, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
			func(a, b [2]int64) [2]int64 { return [2]int64{a[0], a[1] + b[1]} }).UID("sums")
		odd := weir.Filter(sums, func(v [2]int64) bool { return v[1]%2 == 1 }).UID("odd")
		sink(r, odd)
	}
}

func byKey(v [2]int64) string { return strconv.FormatInt(v[0], 10) }

func TestFileSinkChecker(t *testing.T) {
	weirtest.Run(t, weirtest.Config{Seeds: 3}, pipeline(5000, nil, func(r *weirtest.R, s *weir.Stream[[2]int64]) {
		weirtest.FileSink(r, s, func(v [2]int64) []byte { return fmt.Appendf(nil, "%d %d", v[0], v[1]) })
	}))
}

// txnStore is a transactional destination for the recording wrapper.
func TestTwoPhaseCommitChecker(t *testing.T) {
	weirtest.Run(t, weirtest.Config{Seeds: 3}, pipeline(5000, nil, func(r *weirtest.R, s *weir.Stream[[2]int64]) {
		st := newStore()
		values := weir.Map(s, func(v [2]int64) int64 { return v[1] }).WithCodec(codec.Int64())
		weirtest.TwoPhaseCommitSink(r, values, codec.Int64(), func(int, int) (weir.TwoPhaseCommitter[int64, int64], error) {
			return committer{s: st}, nil
		}, nil)
	}))
}

func TestTCPAndUnaligned(t *testing.T) {
	collect := func(r *weirtest.R, s *weir.Stream[[2]int64]) { weirtest.Collect(r, s, byKey) }
	t.Run("tcp", func(t *testing.T) {
		weirtest.Run(t, weirtest.Config{Seeds: 3, TCP: true, Kinds: weirtest.Of(weirtest.ConnReset, weirtest.TaskFailure)},
			pipeline(5000, nil, collect))
	})
	t.Run("unaligned", func(t *testing.T) {
		weirtest.Run(t, weirtest.Config{Seeds: 3, Unaligned: true}, pipeline(5000, nil, collect))
	})
}

// Under at-least-once a sink that duplicates is allowed: the leaky sink
// passes.
func TestAtLeastOnceAllowsDuplicates(t *testing.T) {
	weirtest.Run(t, weirtest.Config{Seeds: 3, Mode: weir.AtLeastOnce, Kinds: failureKinds}, storeJob(5000, true))
}

// windowJob sums tumbling event-time windows per key (window contents and
// timers in keyed state) and collects the results as text.
func windowJob(n int64) func(r *weirtest.R) {
	return func(r *weirtest.R) {
		env := r.Env(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond))
		src := weir.FromGenerator(env, n, func(i int64) [2]int64 { return [2]int64{i % 10, i} }).WithCodec(pairCodec)
		stamped := weir.AssignTimestamps(src, weir.MonotonousTimestamps(func(v [2]int64) int64 { return v[1] }))
		sums := weir.WindowReduce(weir.Window(weir.KeyBy(stamped, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
			weir.TumblingWindows(100*time.Millisecond)), func(a, b [2]int64) [2]int64 { return [2]int64{a[0], a[1] + b[1]} })
		text := weir.Map(sums, func(w weir.Windowed[int64, [2]int64]) string {
			return fmt.Sprintf("%d %v %d", w.Key, w.Window, w.Value[1])
		}).WithCodec(codec.String())
		weirtest.Collect(r, text, func(s string) string { k, _, _ := strings.Cut(s, " "); return k })
	}
}

func TestWindowJob(t *testing.T) {
	weirtest.Run(t, weirtest.Config{Seeds: 3}, windowJob(20000))
}

// The same job on the pebble backend with incremental checkpoints, whose
// shared files live in the fault-injecting checkpoint storage too, and a
// cache of a few entries, so that evictions write to the database between
// checkpoints.
func TestPebbleBackend(t *testing.T) {
	collect := func(r *weirtest.R, s *weir.Stream[[2]int64]) { weirtest.Collect(r, s, byKey) }
	weirtest.Run(t, weirtest.Config{Seeds: 3}, func(r *weirtest.R) {
		backend := weir.WithStateBackend(weir.PebbleBackend(weir.PebbleOptions{Dir: r.TempDir(), Incremental: true,
			BlockCacheSize: 1 << 20, MemTableSize: 1 << 20, CacheBytes: 4 << 10}))
		pipeline(5000, []weir.Option{backend}, collect)(r)
	})
}
