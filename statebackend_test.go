package weir_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/storagetest"
)

// stateBackends are the keyed state backends the metamorphic tests run
// the same jobs over.
func stateBackends(t *testing.T) []struct {
	name string
	b    weir.StateBackend
} {
	return []struct {
		name string
		b    weir.StateBackend
	}{
		{"heap", weir.HeapBackend()},
		{"pebble", weir.PebbleBackend(weir.PebbleOptions{Dir: t.TempDir(), MemTableSize: 1 << 20, BlockCacheSize: 1 << 20})},
		// A cache of a few entries: evictions between every checkpoint.
		{"pebble-incremental-tinycache", weir.PebbleBackend(weir.PebbleOptions{Dir: t.TempDir(), MemTableSize: 1 << 20, BlockCacheSize: 1 << 20, Incremental: true, CacheBytes: 4 << 10})},
	}
}

// The keyed-sum job under random kills gives the same output over every
// backend: each key's sum, and one output per input.
func TestStateBackendsAgreeUnderKills(t *testing.T) {
	const n = 40000
	want := wantSums(n)
	seed := uint64(time.Now().UnixNano())
	r := rand.New(rand.NewPCG(seed, 0))
	var failAt []int64
	at := int64(0)
	for range 2 {
		at += 6000 + r.Int64N(10000)
		failAt = append(failAt, at)
	}
	for _, sb := range stateBackends(t) {
		t.Run(fmt.Sprintf("%s/seed=%d", sb.name, seed), func(t *testing.T) {
			final, count, res := keyedSumJob(t, weir.WithTCPExchanges(false), weir.CheckpointConfig{Interval: 10 * time.Millisecond},
				n, 2, failAt, "", weir.WithStateBackend(sb.b))
			require.Equal(t, want, final)
			require.Equal(t, n, count)
			require.GreaterOrEqual(t, res.Restarts, 1)
			require.Zero(t, res.LeakedSegments)
		})
	}
}

// A job's state moves between backends and parallelisms: a savepoint at
// p=2 restores at p=3, whose savepoint restores at p=1, each job on a
// backend of the chain; together they count every record exactly once.
func TestStateBackendsRescaleAcrossBackends(t *testing.T) {
	// Enough records that no source subtask of the p=3 job (a quarter of
	// the rest each for two of them) can finish before its savepoint: a
	// vertex that partly finished restores only at its parallelism.
	const n = 100000
	storagetest.Run(t, func(t *testing.T, s *storagetest.Storage) {
		heap := weir.HeapBackend()
		peb := weir.PebbleBackend(weir.PebbleOptions{Dir: t.TempDir(), MemTableSize: 1 << 20, BlockCacheSize: 1 << 20})
		for _, chain := range []struct {
			name string
			bs   [3]weir.StateBackend
		}{
			{"heap-pebble-heap", [3]weir.StateBackend{heap, peb, heap}},
			{"pebble-pebble-pebble", [3]weir.StateBackend{peb, peb, peb}},
		} {
			t.Run(chain.name, func(t *testing.T) {
				if s.S3() && chain.name != "heap-pebble-heap" {
					t.Skip("one chain on object storage: both backends' savepoints go through it")
				}
				ckpt := weir.CheckpointConfig{Interval: time.Hour, Dir: s.Root()}
				spDir := s.Savepoints()
				sp := ""
				for i, p := range []int{2, 3} {
					opts := []weir.Option{weir.WithParallelism(p), weir.WithBufferTimeout(time.Millisecond),
						weir.WithCheckpointing(ckpt), weir.WithStateBackend(chain.bs[i])}
					if sp != "" {
						opts = append(opts, weir.WithRestoreFrom(sp))
					}
					env := weir.NewEnvironment(opts...)
					reached := make(chan struct{})
					throttledSumJob(env, n, 10000, reached)
					job, err := env.Start(testCtx(t))
					require.NoError(t, err)
					<-reached
					sp, err = job.TriggerSavepoint(testCtx(t), spDir)
					require.NoError(t, err)
					job.Cancel()
					_, err = job.Wait()
					require.ErrorIs(t, err, context.Canceled)
				}
				env := weir.NewEnvironment(weir.WithParallelism(1), weir.WithBufferTimeout(time.Millisecond),
					weir.WithCheckpointing(ckpt), weir.WithStateBackend(chain.bs[2]), weir.WithRestoreFrom(sp))
				got := throttledSumJob(env, n, n, nil)
				_, err := env.Execute(testCtx(t))
				require.NoError(t, err)
				require.Equal(t, wantSums(n), finalSums(got.Values()))
				require.Len(t, got.Values(), n, "one output per input")
			})
		}
	})
}

// restartHook is a restart strategy that calls fn before every restart.
type restartHook struct {
	fn       func()
	restarts atomic.Int64
}

func (r *restartHook) Next(time.Time) (time.Duration, bool) {
	if r.restarts.Add(1) > 3 {
		return 0, false
	}
	r.fn()
	return 0, true
}
func (r *restartHook) Reset() {}

// A local state directory that cannot be created fails the task with the
// cause; the job restarts per its strategy and, once the disk is usable
// again, completes.
func TestPebbleUnwritableDirFailsTask(t *testing.T) {
	const n = 20000
	blocker := filepath.Join(t.TempDir(), "blocker")
	require.NoError(t, os.WriteFile(blocker, nil, 0o644))
	dir := filepath.Join(blocker, "state") // below a regular file: unusable

	env := weir.NewEnvironment(weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}),
		weir.WithRestartStrategy(&restartHook{fn: func() {}}),
		weir.WithStateBackend(weir.PebbleBackend(weir.PebbleOptions{Dir: dir})))
	throttledSumJob(env, n, n, nil)
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, "pebble: create local state directory")
	require.ErrorContains(t, err, "not a directory")

	hook := &restartHook{fn: func() { _ = os.Remove(blocker) }}
	env = weir.NewEnvironment(weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}),
		weir.WithRestartStrategy(hook), weir.WithStateBackend(weir.PebbleBackend(weir.PebbleOptions{Dir: dir})))
	require.NoError(t, os.WriteFile(blocker, nil, 0o644))
	got := throttledSumJob(env, n, n, nil)
	res, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, 1, res.Restarts)
	require.Equal(t, wantSums(n), finalSums(got.Values()))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "working directories are removed when tasks end")
}

func TestWithStateBackendValidation(t *testing.T) {
	env := weir.NewEnvironment(weir.WithStateBackend(nil))
	throttledSumJob(env, 10, 10, nil)
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, "nil state backend")

	env = weir.NewEnvironment(weir.WithStateBackend(weir.PebbleBackend(weir.PebbleOptions{MemTableSize: 1})))
	throttledSumJob(env, 10, 10, nil)
	_, err = env.Execute(testCtx(t))
	require.ErrorContains(t, err, "memtable size")

	env = weir.NewEnvironment(weir.WithStateBackend(weir.PebbleBackend(weir.PebbleOptions{CacheBytes: 1 << 20, DirtyBytes: 2 << 20})))
	throttledSumJob(env, 10, 10, nil)
	_, err = env.Execute(testCtx(t))
	require.ErrorContains(t, err, "dirty bytes")
}

// Windows (window contents in map and list states, timers written to the
// backend at snapshots) under kills give the batch windows on the pebble
// backend too, with incremental checkpoints.
func TestWindowsOnPebbleUnderKills(t *testing.T) {
	for _, wk := range windowKinds[2:] { // session windows: they merge
		t.Run(wk.kind, func(t *testing.T) {
			evs := outOfOrder(7, 10000, 11, 2, 40)
			env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
				weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, TolerableFailures: 10}),
				weir.WithAutoWatermarkInterval(5*time.Millisecond),
				weir.WithStateBackend(weir.PebbleBackend(weir.PebbleOptions{Dir: t.TempDir(), MemTableSize: 1 << 20, BlockCacheSize: 1 << 20, Incremental: true})))
			var job atomic.Pointer[weir.Job]
			faulty, _ := failAfterCheckpoint(&job, []int64{3000, 7000})
			src := weir.FromGenerator(env, int64(len(evs)), func(i int64) event { return evs[i] }, weir.Rate(60000)).WithCodec(eventCodec)
			ts := weir.AssignTimestamps(weir.Map(src, faulty).WithCodec(eventCodec),
				weir.BoundedOutOfOrderness(40*time.Millisecond, func(e event) int64 { return e.TS }))
			got, _ := weir.Collect(windowSums(ts, assigner(wk.kind, wk.size, wk.slide)))
			j, err := env.Start(testCtx(t))
			require.NoError(t, err)
			job.Store(j)
			res, err := j.Wait()
			require.NoError(t, err)
			require.Equal(t, batchWindows(evs, wk.kind, wk.size, wk.slide), collectedWins(got.Values()))
			require.GreaterOrEqual(t, res.Restarts, 1)
		})
	}
}
