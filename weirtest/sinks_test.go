package weirtest_test

import (
	"fmt"
	"strconv"
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
