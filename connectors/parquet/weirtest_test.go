package parquet_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connectors/parquet"
	"github.com/weirstream/weir/weirtest"
)

// The sink under weirtest's faults (task failures at chosen records,
// failed snapshots, failures before the commit at a checkpoint's
// notification, slow consumers, faulty checkpoint storage): seed by seed,
// the committed files, read back with parquet-go, hold what a fault-free
// run commits, each value once.
func TestUnderInjectedFaults(t *testing.T) {
	weirtest.Run(t, weirtest.Config{Seeds: 6, CheckpointInterval: 10 * time.Millisecond,
		Kinds: weirtest.Of(weirtest.TaskFailure, weirtest.SnapshotFailure, weirtest.CommitFailure, weirtest.WriteError)}, func(r *weirtest.R) {
		env := r.Env(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond))
		src := weir.AssignTimestamps(weir.FromGenerator(env, 20000, genEvent).WithCodec(eventCodec),
			weir.MonotonousTimestamps(func(e event) int64 { return e.Time }))
		m := weir.Map(src, func(e event) event { return e }).Name("map").WithCodec(eventCodec).Rebalance()
		out := filepath.Join(r.TempDir(), "out")
		parquet.Sink(m, parquet.Config[event]{Dir: out, RollSize: 32 << 10, RowGroupSize: 8 << 10})
		r.Output("parquet", func() ([]weirtest.Record, error) {
			files, hidden := readCommitted(t, out)
			if len(hidden) > 0 {
				return nil, fmt.Errorf("hidden files left: %v", hidden)
			}
			var rs []weirtest.Record
			for _, f := range files {
				for _, e := range f.events {
					rs = append(rs, weirtest.Record{Value: fmt.Sprint(e)})
				}
			}
			return rs, nil
		})
	})
}
