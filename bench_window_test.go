package weir_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
)

// BenchmarkWindowTumbling: a generator of timestamped values (1,000 keys,
// a millisecond of event time per 1,000 values, bounded out-of-orderness
// watermarks) -> keyBy -> 1 s tumbling window sum -> discard.
func BenchmarkWindowTumbling(b *testing.B) {
	for _, p := range []int{1, 2} {
		b.Run(fmt.Sprintf("p=%d", p), func(b *testing.B) {
			b.ReportAllocs()
			env := weir.NewEnvironment(weir.WithParallelism(p))
			src := weir.FromGenerator(env, int64(b.N), func(i int64) kv { return kv{i % 1000, i} }).WithCodec(kvCodec)
			ts := weir.AssignTimestamps(src, weir.BoundedOutOfOrderness(time.Second, func(x kv) int64 { return x.V / 1000 }))
			keyed := weir.KeyBy(ts, func(x kv) int64 { return x.K }, codec.Int64())
			sums := weir.WindowReduce(weir.Window(keyed, weir.TumblingWindows(time.Second)),
				func(a, x kv) kv { return kv{a.K, a.V + x.V} })
			weir.Discard(sums)
			if _, err := env.Execute(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
