package postgres_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/connectors/internal/connectortest"
	"github.com/weirstream/weir/connectors/postgres"
	"github.com/weirstream/weir/internal/pgtest"
)

// server returns the package's server (see SharedServer).
func server(t testing.TB) *pgtest.Server { return postgres.SharedServer(t) }

var testCtx = connectortest.Context

// connect opens a connection for the test's own queries.
func connect(t testing.TB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(testCtx(t), server(t).ConnString())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	conn := connect(t)
	_, err := conn.Exec(testCtx(t), sql, args...)
	require.NoError(t, err, sql)
}

var nonWord = regexp.MustCompile(`[^a-z0-9]+`)

// name is a table name and transaction prefix of the test's own.
func name(t testing.TB) string {
	return strings.Trim(nonWord.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
}

// countsTable creates a table for the running counts, (usr, n), with a
// primary key on both for the exactly-once tests (a duplicate fails the
// job) or on usr alone for the upsert tests.
func countsTable(t testing.TB, key string) string {
	tbl := name(t)
	exec(t, "DROP TABLE IF EXISTS "+tbl)
	exec(t, "CREATE TABLE "+tbl+" (usr text NOT NULL, n bigint NOT NULL, at timestamptz DEFAULT now(), PRIMARY KEY ("+key+"))")
	return tbl
}

// count is a user's running count of clicks.
type count struct {
	User string
	N    int64
}

var countCodec = codec.Struct2(codec.String(), func(c count) string { return c.User },
	codec.Int64(), func(c count) int64 { return c.N }, func(u string, n int64) count { return count{u, n} })

func countRow(c count, row []any) error { row[0], row[1] = c.User, c.N; return nil }

// countingJob builds clicks (n generated, over users) -> running count
// per user (keyed state) -> cfg's sink, with failures from k.
func countingJob(env *weir.Environment, n int64, users int, k *killer, cfg postgres.SinkConfig[count]) {
	src := weir.FromGenerator(env, n, func(i int64) int64 { return i }).UID("clicks")
	faulty := weir.Map(src, func(i int64) count { k.Check(); return count{fmt.Sprintf("u%d", i%int64(users)), 1} }).WithCodec(countCodec)
	counts := weir.Reduce(weir.KeyBy(faulty, func(c count) string { return c.User }, codec.String()),
		func(a, b count) count { a.N += b.N; return a }).UID("counts")
	if cfg.Columns == nil {
		cfg.Columns = []string{"usr", "n"}
	}
	if cfg.Row == nil {
		cfg.Row = countRow
	}
	postgres.Sink(counts, cfg).UID("sink")
}

// runningCounts is what the counting job writes: (user, k) for k = 1 ..
// the user's clicks, sorted.
func runningCounts(n int64, users int) []string {
	var out []string
	per := map[string]int64{}
	for i := range n {
		u := fmt.Sprintf("u%d", i%int64(users))
		per[u]++
		out = append(out, fmt.Sprintf("%s:%d", u, per[u]))
	}
	slices.Sort(out)
	return out
}

// finalCounts is the last count of each user, sorted.
func finalCounts(n int64, users int) []string {
	per := map[string]int64{}
	for i := range n {
		per[fmt.Sprintf("u%d", i%int64(users))]++
	}
	var out []string
	for u, c := range per {
		out = append(out, fmt.Sprintf("%s:%d", u, c))
	}
	slices.Sort(out)
	return out
}

// rows reads table's (usr, n) as "usr:n", sorted.
func rows(t testing.TB, table string) []string {
	t.Helper()
	conn := connect(t)
	r, err := conn.Query(testCtx(t), "SELECT usr || ':' || n FROM "+table)
	require.NoError(t, err)
	out, err := pgx.CollectRows(r, pgx.RowTo[string])
	require.NoError(t, err)
	slices.Sort(out)
	return out
}

// prepared lists the prepared transactions whose name starts with prefix.
func prepared(t testing.TB, prefix string) []string {
	t.Helper()
	conn := connect(t)
	r, err := conn.Query(testCtx(t), "SELECT gid FROM pg_prepared_xacts WHERE starts_with(gid, $1) ORDER BY gid", prefix)
	require.NoError(t, err)
	out, err := pgx.CollectRows(r, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

type killer = connectortest.Killer

func testLogger() *zap.Logger {
	if os.Getenv("PGTEST_LOG") == "" {
		return zap.NewNop()
	}
	l, _ := zap.NewDevelopment()
	return l
}
