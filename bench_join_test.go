package weir_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// BenchmarkAsyncIO runs source -> AsyncMap -> discarding sink, one
// subtask, with a function that sleeps 1 ms and a capacity of 100: the
// ideal is 100 requests per ms, 100,000 records/s. Its sleepers
// sub-benchmark is what this machine allows: 100 goroutines sleeping 1 ms
// in a loop, no job (a loaded machine sleeps longer).
func BenchmarkAsyncIO(b *testing.B) {
	b.Run("sleepers", func(b *testing.B) {
		var n atomic.Int64
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				for n.Add(1) <= int64(b.N) {
					time.Sleep(time.Millisecond)
				}
			})
		}
		wg.Wait()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
	for _, mode := range []struct {
		name    string
		ordered bool
	}{{"ordered", true}, {"unordered", false}} {
		b.Run(mode.name, func(b *testing.B) {
			b.ReportAllocs()
			env := weir.NewEnvironment(weir.WithParallelism(1))
			src := weir.FromGenerator(env, int64(b.N), func(i int64) int64 { return i })
			out := weir.AsyncMap(src, func(ctx context.Context, v int64) (int64, error) {
				time.Sleep(time.Millisecond)
				return v, nil
			}, weir.AsyncOptions{Capacity: 100, Ordered: mode.ordered})
			weir.Discard(out)
			if _, err := env.Execute(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
