package weir_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/cputime"
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

// BenchmarkIntervalJoin joins two keyed streams of b.N/2 values each over
// 1,000 keys, timestamps in order (one per ms and stream), bounds ±1 s:
// each value joins about three of the other side. Its keyedsum
// sub-benchmark is the keyed-sum job over b.N values in the same run, the
// reference the join is compared with (records/s over all inputs;
// cpu-ns/op, the process's CPU time per record, is what a busy machine
// disturbs less).
func BenchmarkIntervalJoin(b *testing.B) {
	b.Run("keyedsum", func(b *testing.B) {
		b.ReportAllocs()
		env := weir.NewEnvironment(weir.WithParallelism(1))
		keyedSum(env, int64(b.N))
		cpu := cputime.Process()
		if _, err := env.Execute(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
	})
	for _, wmi := range []time.Duration{200 * time.Millisecond, time.Millisecond} {
		b.Run(fmt.Sprintf("join/watermarks=%v", wmi), func(b *testing.B) { benchmarkIntervalJoin(b, wmi) })
	}
}

// benchmarkIntervalJoin is BenchmarkIntervalJoin's join with periodic
// watermarks every wmi (the default 200 ms, or 1 ms: the buffers then
// hold about the ±1 s of event time only, not the 200 ms of processing
// time between two watermarks, which at this rate is far more).
func benchmarkIntervalJoin(b *testing.B, wmi time.Duration) {
	{
		b.ReportAllocs()
		env := weir.NewEnvironment(weir.WithParallelism(1), weir.WithAutoWatermarkInterval(wmi))
		n := int64(b.N/2 + 1)
		side := func(name string) *weir.KeyedStream[kv, int64] {
			src := weir.FromGenerator(env, n, func(i int64) kv { return kv{i % 1000, i} }).WithCodec(kvCodec).Name(name)
			ts := weir.AssignTimestamps(src, weir.MonotonousTimestamps(func(x kv) int64 { return x.V }))
			return weir.KeyBy(ts, func(x kv) int64 { return x.K }, codec.Int64())
		}
		var pairs atomic.Int64
		j := weir.IntervalJoin[int64](side("left"), side("right")).Between(-time.Second, time.Second).
			Process(func(l, r kv) int64 { return l.V - r.V })
		weir.Discard(weir.Filter(j, func(int64) bool { pairs.Add(1); return false }))
		cpu := cputime.Process()
		if _, err := env.Execute(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(2*n)/b.Elapsed().Seconds(), "records/s")
		b.ReportMetric(float64(cputime.Process()-cpu)/float64(2*n), "cpu-ns/op")
		b.ReportMetric(float64(pairs.Load())/float64(2*n), "pairs/record")
	}
}
