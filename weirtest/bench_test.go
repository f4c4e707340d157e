package weirtest_test

import (
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/weirtest"
)

// BenchmarkSeeds1M runs seeds of a 1 M-record job (five stages, a keyed
// running sum, a Collect checker of its 0.25 M committed values) and
// reports seeds per minute, the fault-free run excluded.
func BenchmarkSeeds1M(b *testing.B) {
	job := pipeline(1_000_000, []weir.Option{weir.WithBufferTimeout(5 * time.Millisecond)},
		func(r *weirtest.R, s *weir.Stream[[2]int64]) { weirtest.Collect(r, s, byKey) })
	b.ResetTimer()
	start := time.Now()
	rep, err := weirtest.Check(b.Context(), weirtest.Config{Seeds: b.N, CheckpointInterval: 100 * time.Millisecond}, job)
	elapsed := time.Since(start) - rep.Baseline
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Minutes(), "seeds/min")
	b.ReportMetric(rep.Baseline.Seconds(), "s/fault-free-run")
	b.Logf("\n%s", rep.Table())
}
