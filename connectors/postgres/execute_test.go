package postgres_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connectors/internal/connectortest"
	"github.com/weirstream/weir/connectors/postgres"
)

// Bad configuration, a server that cannot be reached, a missing table, a
// schema that does not match and a server without prepared transactions
// fail Execute with an error naming the sink and what is wrong, before
// the source reads a record.
func TestExecuteErrors(t *testing.T) {
	s := server(t)
	table := name(t)
	exec(t, "DROP TABLE IF EXISTS "+table+", "+table+"_nokey, "+table+"_strict")
	exec(t, "CREATE TABLE "+table+" (usr text PRIMARY KEY, n bigint, g bigint GENERATED ALWAYS AS (n * 2) STORED)")
	exec(t, "CREATE TABLE "+table+"_nokey (usr text, n bigint)")
	exec(t, "CREATE TABLE "+table+"_strict (usr text, n bigint, must text NOT NULL)")
	exec(t, "DROP VIEW IF EXISTS "+table+"_view")
	exec(t, "CREATE VIEW "+table+"_view AS SELECT * FROM "+table)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := fmt.Sprintf("postgres://weir@%s/postgres?sslmode=disable&connect_timeout=2", ln.Addr())
	ln.Close() // nothing listens there now

	ok := postgres.SinkConfig[count]{ConnString: s.ConnString(), Table: table, TransactionPrefix: table}
	with := func(f func(c *postgres.SinkConfig[count])) postgres.SinkConfig[count] { c := ok; f(&c); return c }
	for _, c := range []struct {
		name  string
		cfg   postgres.SinkConfig[count]
		ckpt  bool
		wants []string
	}{
		{"no connection string", with(func(c *postgres.SinkConfig[count]) { c.ConnString = "" }), true, []string{"no connection string"}},
		{"bad connection string", with(func(c *postgres.SinkConfig[count]) { c.ConnString = "postgres://x:y@:badport/db" }), true,
			[]string{"sink " + table + ": connection string"}},
		{"unreachable", with(func(c *postgres.SinkConfig[count]) { c.ConnString = closed }), true,
			[]string{"sink " + table + ": connecting", "connect"}},
		{"no such database", with(func(c *postgres.SinkConfig[count]) { c.ConnString = s.ConnStringDB("nosuchdb") }), true,
			[]string{"sink " + table + ": connecting", `database "nosuchdb" does not exist`}},
		{"no table", with(func(c *postgres.SinkConfig[count]) { c.Table = "nosuch" }), true,
			[]string{"sink nosuch: no table \"nosuch\""}},
		{"no schema", with(func(c *postgres.SinkConfig[count]) { c.Table = "nosuch.t" }), true,
			[]string{`no table "nosuch"."t"`}},
		{"a view", with(func(c *postgres.SinkConfig[count]) { c.Table = table + "_view" }), true,
			[]string{"is not a table"}},
		{"no column", with(func(c *postgres.SinkConfig[count]) { c.Columns = []string{"usr", "cnt"} }), true,
			[]string{"the table has no column cnt", "its columns: usr text, n bigint, g bigint"}},
		{"generated column", with(func(c *postgres.SinkConfig[count]) { c.Columns = []string{"usr", "g"} }), true,
			[]string{"column g is generated"}},
		{"not null column left out", with(func(c *postgres.SinkConfig[count]) { c.Table = table + "_strict" }), true,
			[]string{"column must is NOT NULL without a default"}},
		{"exactly-once without checkpoints", ok, false, []string{"exactly-once needs checkpointing"}},
		{"no prefix", with(func(c *postgres.SinkConfig[count]) { c.TransactionPrefix = "" }), true, []string{"needs a TransactionPrefix"}},
		{"bad prefix", with(func(c *postgres.SinkConfig[count]) { c.TransactionPrefix = "a'b" }), true, []string{`transaction prefix "a'b"`}},
		{"upsert without key", with(func(c *postgres.SinkConfig[count]) { c.Mode = postgres.Upsert; c.TransactionPrefix = "" }), false,
			[]string{"upsert needs the Key columns"}},
		{"upsert key not written", with(func(c *postgres.SinkConfig[count]) {
			c.Mode, c.Key, c.Columns, c.TransactionPrefix = postgres.Upsert, []string{"n"}, []string{"usr"}, ""
		}), false, []string{"key column n is not among the columns written"}},
		{"upsert without unique index", with(func(c *postgres.SinkConfig[count]) {
			c.Mode, c.Key, c.Table, c.TransactionPrefix = postgres.Upsert, []string{"usr"}, table+"_nokey", ""
		}), false, []string{"no unique index or primary key on exactly (usr)"}},
		{"upsert on part of the key", with(func(c *postgres.SinkConfig[count]) {
			c.Mode, c.Key, c.TransactionPrefix = postgres.Upsert, []string{"usr", "n"}, ""
		}), false, []string{"no unique index or primary key on exactly (usr, n)"}},
		{"duplicate column", with(func(c *postgres.SinkConfig[count]) { c.Columns = []string{"usr", "usr"} }), true, []string{"column usr twice"}},
		{"bad table name", with(func(c *postgres.SinkConfig[count]) { c.Table = "a.b.c" }), true, []string{`table "a.b.c"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := []weir.Option{weir.WithParallelism(1)}
			if c.ckpt {
				opts = append(opts, weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
			}
			env := weir.NewEnvironment(opts...)
			var read atomic.Int64
			src := weir.FromGenerator(env, 10, func(i int64) count { read.Add(1); return count{"u", i} })
			if c.cfg.Columns == nil {
				c.cfg.Columns = []string{"usr", "n"}
			}
			if c.cfg.Row == nil {
				c.cfg.Row = countRow
			}
			postgres.Sink(src, c.cfg)
			_, err := env.Execute(testCtx(t))
			require.Error(t, err)
			require.ErrorContains(t, err, "postgres: sink")
			for _, w := range c.wants {
				require.ErrorContains(t, err, w)
			}
			require.Zero(t, read.Load(), "no record was read")
		})
	}
}

// A server with max_prepared_transactions = 0 cannot run the exactly-once
// sink: Execute says so, naming the setting; the upsert mode runs there.
func TestNoPreparedTransactions(t *testing.T) {
	s := server(t)
	table := countsTable(t, "usr")
	require.NoError(t, s.RestartWith(testCtx(t), "max_prepared_transactions=0"))
	t.Cleanup(func() { require.NoError(t, s.RestartWith(context.Background())) })
	env := weir.NewEnvironment(weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
	countingJob(env, 100, 3, nil, postgres.SinkConfig[count]{ConnString: s.ConnString(), Table: table, TransactionPrefix: table})
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, "postgres: sink "+table+": exactly-once needs prepared transactions, but the server's max_prepared_transactions is 0")

	env = weir.NewEnvironment(weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
	countingJob(env, 100, 3, nil, postgres.SinkConfig[count]{ConnString: s.ConnString(), Table: table, Mode: postgres.Upsert, Key: []string{"usr"}})
	_, err = env.Execute(testCtx(t))
	require.NoError(t, err)
	connectortest.RequireSame(t, finalCounts(100, 3), rows(t, table))
}
