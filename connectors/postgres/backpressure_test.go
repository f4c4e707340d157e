package postgres_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/connectors/internal/connectortest"
	"github.com/weirstream/weir/connectors/postgres"
)

// A database that does not take the rows (the table locked by another
// transaction) holds the job back: the source stops reading after what
// the network buffers and one batch hold, never the whole input, and once
// the lock goes the job completes with every row once.
func TestSlowDatabaseBacksUpTheJob(t *testing.T) {
	const n, users, every = 80_000, 7, 1000
	table := countsTable(t, "usr, n")
	lock := connect(t)
	_, err := lock.Exec(testCtx(t), "BEGIN")
	require.NoError(t, err)
	_, err = lock.Exec(testCtx(t), "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	env := weir.NewEnvironment(weir.WithParallelism(1), weir.WithRestartStrategy(weir.NoRestart()),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 50 * time.Millisecond}))
	var read atomic.Int64
	src := weir.Map(weir.FromGenerator(env, n, func(i int64) int64 { return i }), func(i int64) count {
		read.Add(1)
		return count{fmt.Sprintf("u%d", i%users), 1}
	}).WithCodec(countCodec)
	counts := weir.Reduce(weir.KeyBy(src, func(c count) string { return c.User }, codec.String()),
		func(a, b count) count { a.N += b.N; return a })
	some := weir.Filter(counts, func(c count) bool { return c.N%every == 0 })
	postgres.Sink(some, postgres.SinkConfig[count]{ConnString: server(t).ConnString(), Table: table, Columns: []string{"usr", "n"},
		Row: countRow, TransactionPrefix: table, BatchSize: 1})
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)

	// The sink's COPY waits for the lock...
	waiting := func() bool {
		var w bool
		require.NoError(t, connect(t).QueryRow(testCtx(t),
			"SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = $1::regclass AND NOT granted)", table).Scan(&w))
		return w
	}
	for !waiting() {
		time.Sleep(10 * time.Millisecond)
	}
	// ... and the source, after filling what lies between, stops.
	last := read.Load()
	for stable := 0; stable < 5; {
		time.Sleep(50 * time.Millisecond)
		if r := read.Load(); r == last {
			stable++
		} else {
			stable, last = 0, r
		}
	}
	t.Logf("read %d of %d records while the table was locked", last, n)
	require.Less(t, last, int64(n/2), "the source kept reading while the sink could not write: an unbounded queue")

	_, err = lock.Exec(testCtx(t), "ROLLBACK")
	require.NoError(t, err)
	_, err = j.Wait()
	require.NoError(t, err)
	var want []string
	for _, c := range runningCounts(n, users) {
		_, k, _ := strings.Cut(c, ":")
		if v, err := strconv.ParseInt(k, 10, 64); err == nil && v%every == 0 {
			want = append(want, c)
		}
	}
	require.NotEmpty(t, want)
	connectortest.RequireSame(t, want, rows(t, table))
}
