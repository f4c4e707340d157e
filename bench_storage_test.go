package weir_test

import (
	"context"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/storagetest"
)

// BenchmarkCheckpointStorage runs the keyed-sum job (p=2, 1,024 keys)
// with a checkpoint every 100 ms into a directory and into a bucket of
// the S3 server in the process (gofakes3 over loopback HTTP), in one run:
// records/s, and the mean duration of the completed checkpoints
// (ckpt-ms, from trigger to completion) with how many there were.
func BenchmarkCheckpointStorage(b *testing.B) {
	for _, name := range storagetest.Names {
		b.Run("storage="+name, func(b *testing.B) {
			s := storagetest.Start(b, name)
			env := weir.NewEnvironment(weir.WithParallelism(2),
				weir.WithCheckpointing(weir.CheckpointConfig{Interval: 100 * time.Millisecond, Dir: s.Root()}))
			keyedSum(env, int64(b.N))
			res, err := env.Execute(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			var total time.Duration
			var n int
			for _, c := range res.Checkpoints.History {
				if c.Status == coordinator.Completed {
					total += c.Duration
					n++
				}
			}
			b.ReportMetric(float64(res.Checkpoints.Completed), "checkpoints")
			if n > 0 {
				b.ReportMetric(float64(total.Microseconds())/1e3/float64(n), "ckpt-ms")
			}
		})
	}
}
