package parquet_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	pq "github.com/parquet-go/parquet-go"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connectors/parquet"
)

// BenchmarkParquetSink writes b.N events (three columns) as Parquet files:
// with parquet-go's writer alone (the events made by the same generator
// function, written in batches of 128 to one file with Snappy and a row
// group per 8 MiB, as the sink does), and through a weir job (a generator
// source chained to the sink, one subtask, checkpoints every 200 ms, each
// rolling the part file): into one bucket, and into the default
// event-time hour buckets (events 1 ms apart: a new bucket every 3.6 M).
// The ratio to raw is what counts.
func BenchmarkParquetSink(b *testing.B) {
	for _, mode := range []string{"raw", "sink", "sink-hour-buckets"} {
		b.Run(mode, func(b *testing.B) {
			dir := b.TempDir()
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			var err error
			if mode == "raw" {
				err = rawWrite(filepath.Join(dir, "raw.parquet"), b.N)
			} else {
				err = sinkWrite(b, filepath.Join(dir, "out"), b.N, mode == "sink-hour-buckets")
			}
			if err != nil {
				b.Fatal(err)
			}
			el := time.Since(start).Seconds()
			b.ReportMetric(float64(b.N)/el, "records/s")
		})
	}
}

func rawWrite(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := pq.NewGenericWriter[event](f, pq.Compression(&pq.Snappy))
	batch := make([]event, 0, 128)
	var groupAt int64
	for i := range int64(n) {
		batch = append(batch, genEvent(i))
		if len(batch) == cap(batch) || i == int64(n)-1 {
			if _, err := w.Write(batch); err != nil {
				return err
			}
			batch = batch[:0]
			if w.Size()-groupAt >= parquet.DefaultRowGroupSize {
				if err := w.Flush(); err != nil {
					return err
				}
				groupAt = w.Size()
			}
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

func sinkWrite(b *testing.B, dir string, n int, hourBuckets bool) error {
	env := weir.NewEnvironment(weir.WithParallelism(1),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 200 * time.Millisecond, Dir: filepath.Join(b.TempDir(), "chk")}))
	src := weir.AssignTimestamps(weir.FromGenerator(env, int64(n), genEvent).WithCodec(eventCodec),
		weir.MonotonousTimestamps(func(e event) int64 { return t0 + e.ID }))
	cfg := parquet.Config[event]{Dir: dir}
	if !hourBuckets {
		cfg.Bucket = func(event, int64) string { return "" }
	}
	parquet.Sink(src, cfg)
	_, err := env.Execute(b.Context())
	return err
}
