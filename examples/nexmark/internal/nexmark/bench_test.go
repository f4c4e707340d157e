package nexmark

import "testing"

// BenchmarkGenerator measures the generator alone: events per second.
func BenchmarkGenerator(b *testing.B) {
	g := mustNew(b, Config{Seed: 1})
	b.ReportAllocs()
	n := int64(0)
	for b.Loop() {
		g.Event(n)
		n++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
