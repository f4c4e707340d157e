package eventtime

import (
	"testing"
	"time"
)

// BenchmarkValve measures one watermark through a 4-channel valve: the
// channels advance in turn, so every call moves the channel that held the
// minimum and emits a new combined watermark.
func BenchmarkValve(b *testing.B) {
	const channels = 4
	v, err := NewValve(channels)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	emitted := 0
	ts := int64(0)
	for i := 0; b.Loop(); i++ {
		ts++
		if _, ok := v.InputWatermark(ChannelIndex(i%channels), ts); ok {
			emitted++
		}
	}
	if emitted == 0 {
		b.Fatal("nothing emitted")
	}
}

// BenchmarkValveManyChannels is BenchmarkValve over 256 channels: the cost
// of a watermark grows with the logarithm of the channel count.
func BenchmarkValveManyChannels(b *testing.B) {
	const channels = 256
	v, err := NewValve(channels)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	ts := int64(0)
	for i := 0; b.Loop(); i++ {
		ts++
		v.InputWatermark(ChannelIndex(i%channels), ts)
	}
}

// discard is an Output that drops everything.
type discard struct{ n int }

func (d *discard) EmitWatermark(int64) { d.n++ }
func (d *discard) MarkIdle()           {}
func (d *discard) MarkActive()         {}

// BenchmarkBoundedOutOfOrderness measures one record through the
// generator, with a periodic emit every 1024 records (a source with a
// 200 ms watermark interval sees that at about 5,000 records/s; faster
// sources see fewer per record).
func BenchmarkBoundedOutOfOrderness(b *testing.B) {
	g, err := NewBoundedOutOfOrderness(3 * time.Second)
	if err != nil {
		b.Fatal(err)
	}
	out := &discard{}
	b.ReportAllocs()
	ts := int64(1_700_000_000_000)
	for i := 0; b.Loop(); i++ {
		// Mostly rising timestamps, every 8th record 5 s late.
		ts += 3
		if i&7 == 7 {
			g.OnEvent(ts-5000, out)
		} else {
			g.OnEvent(ts, out)
		}
		if i&1023 == 1023 {
			g.OnPeriodicEmit(out)
		}
	}
}
