package window_test

import (
	"fmt"
	"testing"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime/window"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state/heap"
)

// countOut counts what an operator emits.
type countOut struct{ fired, late int }

func (o *countOut) Emit([]byte, window.Window, int64) error { o.fired++; return nil }
func (o *countOut) Late([]byte, int64, int64) error         { o.late++; return nil }

// BenchmarkWindowCoreTumbling measures the window core alone on the heap
// backend: 1,000 keys, tumbling event-time windows of 1 s summing int64
// values, timestamps advancing 1 ms every 100 elements (100 elements per
// key and window), a watermark every 1,000 elements. keys=bytes has
// string keys (serialized keys in the backend), keys=int64 int64 keys
// held by value (window.UseKeyCodec).
func BenchmarkWindowCoreTumbling(b *testing.B) {
	for _, typed := range []bool{false, true} {
		name := map[bool]string{false: "keys=bytes", true: "keys=int64"}[typed]
		b.Run(name, func(b *testing.B) { benchmarkWindowCore(b, typed) })
	}
}

func benchmarkWindowCore(b *testing.B, typed bool) {
	const keys = 1000
	be, err := heap.New(heap.Config{})
	if err != nil {
		b.Fatal(err)
	}
	out := &countOut{}
	op, err := window.New(be, window.Config{Assigner: window.TumblingWindows(1000, 0)},
		window.Reduce(codec.Int64(), func(a, v int64) int64 { return a + v }), out)
	if err != nil {
		b.Fatal(err)
	}
	if typed {
		if err := window.UseKeyCodec(op, codec.Int64()); err != nil {
			b.Fatal(err)
		}
	}
	type key struct {
		b  []byte
		kg int
	}
	ks := make([]key, keys)
	for i := range ks {
		k := []byte(fmt.Sprintf("key-%04d", i))
		if typed {
			k = codec.Int64().Append(nil, int64(i))
		}
		ks[i] = key{k, keygroup.ForHash(codec.Hash64(k), be.MaxParallelism())}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		ts := int64(i / 100)
		k := ks[(i*7919)%keys]
		if err := op.ProcessElement(k.b, k.kg, ts, 1); err != nil {
			b.Fatal(err)
		}
		i++
		if i%1000 == 0 {
			if err := op.AdvanceWatermark(ts - 1); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	if b.N > 200_000 && out.fired == 0 {
		b.Fatal("no window fired")
	}
}
