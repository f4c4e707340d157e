package weirtest_test

import (
	"fmt"
	"testing"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/weirtest"
)

// TestSums is the README's example, kept compiling and passing here.
func TestSums(t *testing.T) {
	weirtest.Run(t, weirtest.Config{Seeds: 5, TCP: true}, func(r *weirtest.R) {
		env := r.Env(weir.WithParallelism(2)) // checkpoints, restarts, faults: the harness's
		src := weir.FromGenerator(env, 20_000, func(i int64) [2]int64 { return [2]int64{i % 10, i} }).
			WithCodec(pairCodec)
		sums := weir.Reduce(weir.KeyBy(src, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
			func(a, b [2]int64) [2]int64 { return [2]int64{a[0], a[1] + b[1]} })
		// Judge the collected sums; each key's sums must keep their order.
		weirtest.Collect(r, sums, func(v [2]int64) string { return fmt.Sprint(v[0]) })
	})
}
