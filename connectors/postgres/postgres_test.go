package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connectors/internal/connectortest"
	"github.com/weirstream/weir/connectors/postgres"
)

// checkpointed is the environment of the fault tests: checkpoints every
// 10 ms, restarts without delay.
func checkpointed(p int, opts ...weir.Option) *weir.Environment {
	return weir.NewEnvironment(append([]weir.Option{weir.WithLogger(testLogger()), weir.WithParallelism(p), weir.WithBufferTimeout(time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, TolerableFailures: 1000}),
		weir.WithRestartStrategy(weir.FixedDelayRestart(100, 10*time.Millisecond))}, opts...)...)
}

// Generated clicks -> running count per user -> PostgreSQL, exactly once,
// with task failures: the table holds every running count exactly once
// (its primary key would fail a duplicate), and no prepared transaction
// of the sink is left.
func TestExactlyOnceWithFailures(t *testing.T) {
	for _, p := range []int{1, 3} {
		t.Run(fmt.Sprintf("p%d", p), func(t *testing.T) {
			table := countsTable(t, "usr, n")
			const n, users = 6000, 7
			env := checkpointed(p)
			k := &killer{At: []int64{1000, 3000, 5000}}
			countingJob(env, n, users, k, postgres.SinkConfig[count]{ConnString: server(t).ConnString(), Table: table,
				TransactionPrefix: table, BatchSize: 100})
			j, err := env.Start(testCtx(t))
			require.NoError(t, err)
			k.Job.Store(j)
			res, err := j.Wait()
			require.NoError(t, err)
			require.Equal(t, 3, k.Done(), "every injected failure fired")
			connectortest.RequireSame(t, runningCounts(n, users), rows(t, table))
			require.Empty(t, prepared(t, table))
			t.Logf("restarts %d, checkpoints %d completed", res.Restarts, res.Checkpoints.Completed)
		})
	}
}

// The server restarts (a fast shutdown: its connections close, open
// transactions roll back, prepared ones stay) while an exactly-once job
// writes, twice: the job fails over or retries its commits, and the
// table is exactly the batch answer.
func TestServerRestartDuringJob(t *testing.T) {
	s := server(t)
	table := countsTable(t, "usr, n")
	const n, users = 8000, 5
	var (
		wg       sync.WaitGroup
		restarts [2]sync.Once
		errs     [2]error
		at       [2]atomic.Int64
	)
	defer wg.Wait()
	k := &killer{}
	k.OnRecord = func(c int64) {
		for i, from := range []int64{2000, 5000} {
			if c >= from && k.Completed(2*(i+1)) {
				restarts[i].Do(func() {
					at[i].Store(c)
					wg.Go(func() { errs[i] = s.Restart(context.Background(), 100*time.Millisecond) })
				})
			}
		}
	}
	env := checkpointed(2)
	countingJob(env, n, users, k, postgres.SinkConfig[count]{ConnString: s.ConnString(), Table: table, TransactionPrefix: table, BatchSize: 200})
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	k.Job.Store(j)
	res, err := j.Wait()
	require.NoError(t, err)
	wg.Wait()
	for i := range errs {
		require.NotZero(t, at[i].Load(), "restart %d happened while the job ran", i)
		require.NoError(t, errs[i], "restart %d", i)
	}
	connectortest.RequireSame(t, runningCounts(n, users), rows(t, table))
	require.Empty(t, prepared(t, table))
	t.Logf("server restarted at records %d and %d; job restarts %d, checkpoints %d completed, %d failed",
		at[0].Load(), at[1].Load(), res.Restarts, res.Checkpoints.Completed, res.Checkpoints.Failed)
}

// The sink's connections are killed (pg_terminate_backend) while they
// write, several times: the transactions they had open are lost on the
// server, the job fails over, and the table is exactly the batch answer.
func TestConnectionKilledMidTransaction(t *testing.T) {
	table := countsTable(t, "usr, n")
	const n, users = 6000, 7
	admin := connect(t)
	var (
		kills  atomic.Int64
		killed atomic.Int64 // backends terminated
		mu     sync.Mutex
		errs   []error
	)
	k := &killer{}
	k.OnRecord = func(c int64) {
		if c%1500 == 0 && k.Completed(1) {
			kills.Add(1)
			mu.Lock()
			defer mu.Unlock()
			// Only the sink's connections, which name themselves.
			var m int64
			err := admin.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE application_name LIKE 'weir postgres sink '||$1||'%' AND state = 'idle in transaction') s`, table).Scan(&m)
			if err != nil {
				errs = append(errs, err)
			}
			killed.Add(m)
		}
	}
	env := checkpointed(2)
	countingJob(env, n, users, k, postgres.SinkConfig[count]{ConnString: server(t).ConnString(), Table: table, TransactionPrefix: table, BatchSize: 50})
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	k.Job.Store(j)
	res, err := j.Wait()
	require.NoError(t, err)
	require.Empty(t, errs)
	require.NotZero(t, killed.Load(), "a connection in a transaction was killed (of %d tries)", kills.Load())
	connectortest.RequireSame(t, runningCounts(n, users), rows(t, table))
	require.Empty(t, prepared(t, table))
	t.Logf("%d backends killed in %d tries; job restarts %d", killed.Load(), kills.Load(), res.Restarts)
}

// A row that violates the table's primary key fails the job with the
// server's error naming the row's key; the transaction it was in, with
// the batches copied before it, is rolled back, and no prepared
// transaction is left.
func TestConstraintViolationFailsJob(t *testing.T) {
	table := name(t)
	exec(t, "DROP TABLE IF EXISTS "+table)
	exec(t, "CREATE TABLE "+table+" (id bigint PRIMARY KEY, v text)")
	env := weir.NewEnvironment(weir.WithParallelism(1), weir.WithRestartStrategy(weir.NoRestart()),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
	// ids 0..999, then 500 again.
	src := weir.FromGenerator(env, 1001, func(i int64) int64 {
		if i == 1000 {
			return 500
		}
		return i
	})
	postgres.Sink(src, postgres.SinkConfig[int64]{ConnString: server(t).ConnString(), Table: table, Columns: []string{"id", "v"},
		Row:               func(id int64, row []any) error { row[0], row[1] = id, fmt.Sprint("v", id); return nil },
		TransactionPrefix: table, BatchSize: 100})
	_, err := env.Execute(testCtx(t))
	require.Error(t, err)
	require.ErrorContains(t, err, "postgres: sink "+table)
	require.ErrorContains(t, err, "duplicate key value violates unique constraint")
	require.ErrorContains(t, err, "Key (id)=(500) already exists")
	require.Empty(t, rows2(t, table), "nothing of the failed transaction is visible")
	require.Empty(t, prepared(t, table))
}

func rows2(t testing.TB, table string) []int64 {
	t.Helper()
	var ids []int64
	r, err := connect(t).Query(testCtx(t), "SELECT id FROM "+table)
	require.NoError(t, err)
	defer r.Close()
	for r.Next() {
		var id int64
		require.NoError(t, r.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, r.Err())
	return ids
}

// Upsert mode with task failures: rows are written again after each
// restore, but the table ends with each user's final count once.
func TestUpsertWithFailures(t *testing.T) {
	table := countsTable(t, "usr")
	const n, users = 6000, 13
	env := checkpointed(2)
	k := &killer{At: []int64{1000, 3000, 5000}}
	countingJob(env, n, users, k, postgres.SinkConfig[count]{ConnString: server(t).ConnString(), Table: table,
		Mode: postgres.Upsert, Key: []string{"usr"}, BatchSize: 64})
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	k.Job.Store(j)
	_, err = j.Wait()
	require.NoError(t, err)
	require.Equal(t, 3, k.Done())
	connectortest.RequireSame(t, finalCounts(n, users), rows(t, table))
}

// Upsert without checkpointing: every batch, and the rest at the end, is
// upserted; a batch that holds one key several times keeps its last row.
func TestUpsertWithoutCheckpoints(t *testing.T) {
	table := countsTable(t, "usr")
	exec(t, "INSERT INTO "+table+" (usr, n) VALUES ('u1', -1), ('zz', 42)")
	const n, users = 1000, 3
	env := weir.NewEnvironment(weir.WithParallelism(1))
	countingJob(env, n, users, nil, postgres.SinkConfig[count]{ConnString: server(t).ConnString(), Table: table,
		Mode: postgres.Upsert, Key: []string{"usr"}, BatchSize: 128})
	_, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, append(finalCounts(n, users), "zz:42"), rows(t, table))
}

// A user's Row function that fails or panics fails the job with its
// error, the process intact.
func TestRowErrors(t *testing.T) {
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprintf("panic=%v", panics), func(t *testing.T) {
			table := countsTable(t, "usr, n")
			env := weir.NewEnvironment(weir.WithParallelism(1), weir.WithRestartStrategy(weir.NoRestart()),
				weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
			countingJob(env, 100, 3, nil, postgres.SinkConfig[count]{ConnString: server(t).ConnString(), Table: table, TransactionPrefix: table,
				Row: func(c count, row []any) error {
					if c.N == 7 {
						if panics {
							panic("row seven")
						}
						return fmt.Errorf("no row seven")
					}
					return countRow(c, row)
				}})
			_, err := env.Execute(testCtx(t))
			if panics {
				require.ErrorContains(t, err, "Row panicked on a value: row seven")
			} else {
				require.ErrorContains(t, err, "no row seven")
			}
			require.ErrorContains(t, err, "postgres: sink "+table)
			require.Empty(t, rows(t, table))
		})
	}
}

// Canceling a job whose sink waits on a server that went away returns at
// once: the sink's statements give way to the task's context instead of
// waiting out their (here ten-minute) request timeout.
func TestCancelWhileServerIsGone(t *testing.T) {
	s := server(t)
	table := countsTable(t, "usr, n")
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var gone sync.Once
	var wg sync.WaitGroup
	k := &killer{}
	k.OnRecord = func(c int64) {
		if c >= 2000 && k.Completed(1) {
			gone.Do(func() {
				wg.Go(func() {
					s.Down()
					time.AfterFunc(100*time.Millisecond, cancel)
				})
			})
		}
	}
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, TolerableFailures: 1000}))
	countingJob(env, 1_000_000, 7, k, postgres.SinkConfig[count]{ConnString: s.ConnString(), Table: table, TransactionPrefix: table,
		BatchSize: 100, RequestTimeout: 10 * time.Minute})
	j, err := env.Start(ctx)
	require.NoError(t, err)
	k.Job.Store(j)
	connectortest.RequireCanceled(t, j)
	wg.Wait()
	require.NoError(t, s.Up(testCtx(t)))
	// The prepared transactions the canceled job left: the next run of
	// the job rolls them back; here the test does.
	conn := connect(t)
	for _, g := range prepared(t, table) {
		_, err := conn.Exec(testCtx(t), "ROLLBACK PREPARED '"+g+"'")
		require.NoError(t, err)
	}
}
