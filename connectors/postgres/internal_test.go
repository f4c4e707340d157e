package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/pgtest"
)

// One server for the package's tests, internal and external, started by
// the first test that needs it and stopped after the last.
var (
	srvOnce sync.Once
	srv     *pgtest.Server
	srvErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if srv != nil {
		if err := srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the PostgreSQL server:", err)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// SharedServer returns the package's server, starting it if needed.
// Without PostgreSQL binaries the test skips, saying how to get them,
// unless CI=true: CI must run these tests.
func SharedServer(t testing.TB) *pgtest.Server {
	t.Helper()
	srvOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		srv, srvErr = pgtest.Start(ctx)
	})
	if srvErr == pgtest.ErrNoBinaries {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %v: .ci/run installs them", srvErr)
		}
		t.Skipf("%v: %s to run the PostgreSQL tests", srvErr, pgtest.InstallHint)
	}
	require.NoError(t, srvErr)
	return srv
}

func TestTxnCodec(t *testing.T) {
	for _, tx := range []*txn{{}, {TxnHandle: weir.TxnHandle{ID: "p-1-2", PreCommitted: true}, XID: 1 << 40}, {TxnHandle: weir.TxnHandle{ID: "x", Empty: true, PreCommitted: true}}} {
		got, err := txnCodec{}.Decode(txnCodec{}.Append(nil, tx))
		require.NoError(t, err)
		require.Equal(t, tx, got)
	}
	b := txnCodec{}.Append(nil, &txn{TxnHandle: weir.TxnHandle{ID: "p-1-2"}})
	for _, bad := range [][]byte{nil, {0}, b[:len(b)-1], append(b, 0)} {
		_, err := txnCodec{}.Decode(bad)
		require.ErrorContains(t, err, "corrupt")
	}
}

func TestParseGID(t *testing.T) {
	for _, c := range []struct {
		prefix, gid string
		sub         int
		ckpt        uint64
		ok          bool
	}{
		{"p", "p-3-17", 3, 17, true},
		{"a-b", "a-b-0-1", 0, 1, true},
		{"a", "a-b-0-1", 0, 0, false}, // another prefix
		{"a", "a-1-3-5", 0, 0, false}, // prefix a-1's
		{"a-1", "a-1-5", 0, 0, false}, // prefix a's
		{"p", "p-03-1", 0, 0, false},  // not as written
		{"p", "p--3-1", 0, 0, false},  // negative
		{"p", "p-1-x", 0, 0, false},   // no checkpoint
		{"p", "q-1-1", 0, 0, false},   // no prefix
		{"p", "p-1", 0, 0, false},     // too short
		{"p", gid("p", 12, 9), 12, 9, true},
	} {
		sub, ckpt, ok := parseGID(c.prefix, c.gid)
		require.Equal(t, c.ok, ok, "%s %s", c.prefix, c.gid)
		if ok {
			require.Equal(t, [2]uint64{uint64(c.sub), c.ckpt}, [2]uint64{uint64(sub), ckpt}, c.gid)
		}
	}
}

type pair struct {
	ID int64
	V  string
}

// testCommitter returns the committer of subtask sub of par for a fresh
// table (id bigint primary key, v text) named after the test.
func testCommitter(t *testing.T, table string, sub, par int) *committer[pair] {
	s := SharedServer(t)
	cfg := &SinkConfig[pair]{ConnString: s.ConnString(), Table: table, Columns: []string{"id", "v"},
		Row:               func(p pair, row []any) error { row[0], row[1] = p.ID, p.V; return nil },
		TransactionPrefix: table, BatchSize: 3, RequestTimeout: time.Minute, Logger: zap.NewNop()}
	require.NoError(t, cfg.Validate())
	pc, err := pgx.ParseConfig(cfg.ConnString)
	require.NoError(t, err)
	c := newCommitter(cfg, pc, sub, par)
	c.SetContext(t.Context())
	t.Cleanup(func() { c.Close() })
	return c
}

func sqlConn(t *testing.T) *pgx.Conn {
	conn, err := pgx.Connect(t.Context(), SharedServer(t).ConnString())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func freshTable(t *testing.T, conn *pgx.Conn, table string) {
	_, err := conn.Exec(t.Context(), "DROP TABLE IF EXISTS "+table+"; CREATE TABLE "+table+" (id bigint PRIMARY KEY, v text)")
	require.NoError(t, err)
}

func count(t *testing.T, conn *pgx.Conn, sql string, args ...any) int {
	var n int
	require.NoError(t, conn.QueryRow(t.Context(), sql, args...).Scan(&n))
	return n
}

// commitNow commits tx and waits for the commit the committer runs in the
// background.
func commitNow[T any](c *committer[T], tx *txn) error {
	return errors.Join(c.Commit(tx), c.awaitCommit())
}

// The server restarts between a transaction's prepare and its commit:
// the commit waits for it on a new connection and succeeds; committing
// again (as a restore does) is harmless; a prepared transaction rolled
// back behind the sink's back is reported lost, not taken as committed.
func TestCommitAcrossServerRestart(t *testing.T) {
	const table = "commit_across_restart"
	conn := sqlConn(t)
	freshTable(t, conn, table)
	c := testCommitter(t, table, 0, 1)
	tx, err := c.BeginAfter(0)
	require.NoError(t, err)
	require.Equal(t, table+"-0-1", tx.ID)
	for i := range int64(10) {
		require.NoError(t, c.Write(tx, pair{i, "a"}))
	}
	require.NoError(t, c.PreCommit(tx))
	require.True(t, tx.PreCommitted)
	require.NotZero(t, tx.XID)
	require.Zero(t, count(t, conn, "SELECT count(*) FROM "+table), "prepared rows are invisible")
	require.Equal(t, 1, count(t, conn, "SELECT count(*) FROM pg_prepared_xacts WHERE gid = $1", tx.ID))

	conn.Close(t.Context())
	done := make(chan error, 1)
	go func() { done <- SharedServer(t).Restart(context.Background(), 300*time.Millisecond) }()
	time.Sleep(50 * time.Millisecond) // the server is going down or down
	require.NoError(t, commitNow(c, tx))
	require.NoError(t, <-done)

	conn = sqlConn(t)
	require.Equal(t, 10, count(t, conn, "SELECT count(*) FROM "+table))
	require.NoError(t, commitNow(c, tx), "committing again")

	// A second transaction, rolled back by someone else.
	tx2, err := c.BeginAfter(1)
	require.NoError(t, err)
	require.NoError(t, c.Write(tx2, pair{100, "b"}))
	require.NoError(t, c.PreCommit(tx2))
	_, err = conn.Exec(t.Context(), "ROLLBACK PREPARED '"+tx2.ID+"'")
	require.NoError(t, err)
	require.ErrorIs(t, commitNow(c, tx2), ErrTransactionLost)
	require.NoError(t, c.Abort(tx2), "aborting one gone already")

	// An empty transaction prepares nothing.
	tx3, err := c.BeginAfter(2)
	require.NoError(t, err)
	require.NoError(t, c.PreCommit(tx3))
	require.True(t, tx3.Empty)
	require.NoError(t, c.Commit(tx3))
	require.Equal(t, 10, count(t, conn, "SELECT count(*) FROM "+table))
}

// At its first transaction a subtask rolls back the prepared transactions
// of its prefix named after a checkpoint above the restored one, for the
// subtask indices it answers for (index mod parallelism), and nothing
// else.
func TestRollbackLingering(t *testing.T) {
	const table = "rollback_lingering"
	conn := sqlConn(t)
	freshTable(t, conn, table)
	prep := func(sub, par int, last uint64, id int64) string {
		c := testCommitter(t, table, sub, par)
		c.cleaned = true // leave the others
		tx, err := c.BeginAfter(barrier.CheckpointID(last))
		require.NoError(t, err)
		require.NoError(t, c.Write(tx, pair{id, "x"}))
		require.NoError(t, c.PreCommit(tx))
		return tx.ID
	}
	keep1 := prep(0, 3, 0, 1) // -0-1: of the restored checkpoint 1
	drop1 := prep(0, 3, 1, 2) // -0-2
	keep2 := prep(1, 3, 1, 3) // -1-2: subtask 1's
	drop2 := prep(2, 3, 2, 4) // -2-3: 2 mod 2 = 0
	keepOther := fmt.Sprintf("%s_x-0-5", table)
	_, err := conn.Exec(t.Context(), "BEGIN; INSERT INTO "+table+" VALUES (5, 'y'); PREPARE TRANSACTION '"+keepOther+"'")
	require.NoError(t, err)

	c := testCommitter(t, table, 0, 2) // rescaled from 3 to 2, restored from checkpoint 1
	_, err = c.BeginAfter(1)
	require.NoError(t, err)
	var left []string
	r, err := conn.Query(t.Context(), "SELECT gid FROM pg_prepared_xacts WHERE starts_with(gid, $1) ORDER BY gid", table)
	require.NoError(t, err)
	left, err = pgx.CollectRows(r, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{keep1, keep2, keepOther}, left, "rolled back %s and %s", drop1, drop2)
	for _, g := range left {
		_, err := conn.Exec(t.Context(), "ROLLBACK PREPARED '"+g+"'")
		require.NoError(t, err)
	}
}

// A sink restored with another TransactionPrefix rolls back the lingering
// transactions of the prefix its restored transactions were named with:
// left prepared, they would hold their rows' locks for good (a replayed
// row of the same key then waits on them).
func TestRollbackLingeringAfterPrefixChange(t *testing.T) {
	const table = "rollback_old_prefix"
	conn := sqlConn(t)
	freshTable(t, conn, table)
	old := testCommitter(t, table, 0, 1)
	old.cleaned = true
	tx, err := old.BeginAfter(1)
	require.NoError(t, err)
	require.NoError(t, old.Write(tx, pair{1, "x"}))
	require.NoError(t, old.PreCommit(tx)) // prepared for checkpoint 2, which never completed
	require.Equal(t, table+"-0-2", tx.ID)

	c := testCommitter(t, table, 0, 1)
	c.cfg.TransactionPrefix = table + "_v2"
	// The restore of checkpoint 1 aborts its open transaction, named with
	// the old prefix, then begins.
	require.NoError(t, c.Abort(&txn{TxnHandle: weir.TxnHandle{ID: table + "-0-2"}}))
	next, err := c.BeginAfter(1)
	require.NoError(t, err)
	require.Equal(t, table+"_v2-0-2", next.ID)
	require.Zero(t, count(t, conn, "SELECT count(*) FROM pg_prepared_xacts WHERE starts_with(gid, $1)", table+"-"),
		"the old prefix's lingering transaction was rolled back")
}
