package weirtest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/weirtest"
)

var pairCodec = codec.Struct2(
	codec.Int64(), func(v [2]int64) int64 { return v[0] },
	codec.Int64(), func(v [2]int64) int64 { return v[1] },
	func(a, b int64) [2]int64 { return [2]int64{a, b} })

// sumJob is a correct job: running sums per key, where each key's values
// come from one source subtask, so every key's sums are deterministic.
func sumJob(n int64) func(r *weirtest.R) {
	return func(r *weirtest.R) {
		env := r.Env(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond))
		src := weir.FromGenerator(env, n, func(i int64) [2]int64 { return [2]int64{i % 10, i} }).WithCodec(pairCodec)
		sums := weir.Reduce(weir.KeyBy(src, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
			func(a, b [2]int64) [2]int64 { return [2]int64{a[0], a[1] + b[1]} }).Name("sum")
		weirtest.Collect(r, sums, func(v [2]int64) string { return fmt.Sprint(v[0]) })
	}
}

func TestCorrectJobPasses(t *testing.T) {
	rep := weirtest.Run(t, weirtest.Config{Seeds: 4}, sumJob(20000))
	if len(rep.Seeds) != 4 {
		t.Fatalf("ran %d seeds, want 4", len(rep.Seeds))
	}
}
