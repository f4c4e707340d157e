package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connectors/postgres"
)

// BenchmarkPostgresSink writes b.N rows (text, bigint) into a table: with
// pgx COPY alone (one COPY of every row: the client library's best), and
// through the sink, exactly-once (checkpoints every 200 ms) and upsert, at
// parallelism 1. The ratio to raw is what counts.
func BenchmarkPostgresSink(b *testing.B) {
	for _, mode := range []string{"raw-copy", "exactly-once", "upsert"} {
		b.Run(mode, func(b *testing.B) {
			table := countsTable(b, "usr, n")
			if mode == "upsert" {
				table = countsTable(b, "usr")
			}
			exec(b, "TRUNCATE "+table)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			var err error
			switch mode {
			case "raw-copy":
				conn := connect(b)
				_, err = conn.CopyFrom(testCtx(b), pgx.Identifier{table}, []string{"usr", "n"},
					pgx.CopyFromSlice(b.N, func(i int) ([]any, error) { return []any{"u" + string(rune('a'+i%26)), int64(i)}, nil }))
			default:
				env := weir.NewEnvironment(weir.WithParallelism(1), weir.WithCheckpointing(weir.CheckpointConfig{Interval: 200 * time.Millisecond}))
				src := weir.FromGenerator(env, int64(b.N), func(i int64) count { return count{"u" + string(rune('a'+i%26)), i} }).WithCodec(countCodec)
				cfg := postgres.SinkConfig[count]{ConnString: server(b).ConnString(), Table: table, Columns: []string{"usr", "n"}, Row: countRow,
					TransactionPrefix: table}
				if mode == "upsert" {
					cfg.Mode, cfg.Key, cfg.TransactionPrefix = postgres.Upsert, []string{"usr"}, ""
				}
				postgres.Sink(src, cfg)
				_, err = env.Execute(testCtx(b))
			}
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
		})
	}
}
