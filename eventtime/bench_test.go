package eventtime

import "testing"

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
