package weir_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/storagetest"
	"github.com/weirstream/weir/state"
)

// flakyStorage is file checkpoint storage whose metadata writes fail while
// fail says so (a full disk, a read-only directory).
type flakyStorage struct {
	*state.FileStorage
	fail func(id barrier.CheckpointID) bool
}

var errDiskFull = errors.New("no space left on device (injected)")

func (s *flakyStorage) WriteMetadata(m state.Metadata) error {
	if s.fail(m.ID) {
		return errDiskFull
	}
	return s.FileStorage.WriteMetadata(m)
}

func sumJobWithStorage(t *testing.T, n int64, cfg weir.CheckpointConfig, opts ...weir.Option) (*weir.Collected[[2]int64], *weir.Environment) {
	env := weir.NewEnvironment(append([]weir.Option{weir.WithParallelism(2), weir.WithCheckpointing(cfg),
		weir.WithBufferTimeout(time.Millisecond)}, opts...)...)
	src := weir.FromGenerator(env, n, func(i int64) [2]int64 { return [2]int64{i % 37, i} }).WithCodec(pairCodec)
	sums := weir.Reduce(weir.KeyBy(src, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
		func(a, b [2]int64) [2]int64 { return [2]int64{a[0], a[1] + b[1]} }).Name("sum")
	got, _ := weir.Collect(sums)
	return got, env
}

// Checkpoints whose files cannot be written fail and are counted; within
// the tolerated failures the job goes on and its result is exact.
func TestUnwritableCheckpointsAreCountedFailures(t *testing.T) {
	const n = 100000
	fs, err := state.NewFileStorage(state.FileStorageConfig{Dir: t.TempDir()})
	require.NoError(t, err)
	st := &flakyStorage{FileStorage: fs, fail: func(id barrier.CheckpointID) bool { return id%2 == 0 }}
	got, env := sumJobWithStorage(t, n, weir.CheckpointConfig{Interval: 10 * time.Millisecond, TolerableFailures: 1, Storage: st})
	res, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, wantSums(n), finalSums(got.Values()))
	require.Len(t, got.Values(), n)
	require.Zero(t, res.Restarts)
	if res.Checkpoints.Completed+res.Checkpoints.Failed >= 3 {
		var diskFull int
		for _, c := range res.Checkpoints.History {
			if errors.Is(c.Failure, errDiskFull) {
				diskFull++
			}
		}
		require.Positive(t, diskFull, "failed checkpoints are counted with their cause")
	}
}

// Beyond the tolerated failures the job fails, restarts per its strategy,
// and gives up with an error that says why.
func TestAlwaysFailingCheckpointsFailTheJob(t *testing.T) {
	fs, err := state.NewFileStorage(state.FileStorageConfig{Dir: t.TempDir()})
	require.NoError(t, err)
	st := &flakyStorage{FileStorage: fs, fail: func(barrier.CheckpointID) bool { return true }}
	restart := weir.FixedDelayRestart(2, time.Millisecond)
	_, env := sumJobWithStorage(t, 1<<40, weir.CheckpointConfig{Interval: 10 * time.Millisecond, Storage: st},
		weir.WithRestartStrategy(restart))
	res, err := env.Execute(testCtx(t))
	require.Error(t, err)
	require.ErrorIs(t, err, coordinator.ErrTooManyFailures)
	require.Equal(t, 2, res.Restarts)
	var diskFull bool
	for _, c := range res.Checkpoints.History {
		diskFull = diskFull || errors.Is(c.Failure, errDiskFull)
	}
	require.True(t, diskFull, "the failed checkpoints name their cause: %+v", res.Checkpoints.History)
	require.Zero(t, res.LeakedSegments)
}

// A sink stalled longer than the checkpoint timeout: the checkpoint
// expires and counts as failed; the job then completes exactly.
func TestCheckpointTimesOutWhileSinkStalls(t *testing.T) {
	const n = 100000
	var (
		seen atomic.Int64
		job  atomic.Pointer[weir.Job]
		ctx  = testCtx(t)
	)
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, Timeout: 30 * time.Millisecond, TolerableFailures: 100}))
	src := weir.FromGenerator(env, n, func(i int64) [2]int64 { return [2]int64{i % 37, i} }).WithCodec(pairCodec)
	sums := weir.Reduce(weir.KeyBy(src, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
		func(a, b [2]int64) [2]int64 { return [2]int64{a[0], a[1] + b[1]} }).Name("sum")
	stalled := weir.Map(sums, func(v [2]int64) [2]int64 {
		// The stall under test: this task takes nothing, barriers
		// included, until a checkpoint expired (the coordinator keeps
		// triggering every 10 ms, so one is bound to be in flight).
		if seen.Add(1) == 2000 {
			for j := job.Load(); ctx.Err() == nil && (j == nil || j.CheckpointStats().Failed == 0); j = job.Load() {
				time.Sleep(time.Millisecond)
			}
		}
		return v
	}).WithCodec(pairCodec)
	got, _ := weir.Collect(stalled)
	j, err := env.Start(ctx)
	require.NoError(t, err)
	job.Store(j)
	res, err := j.Wait()
	require.NoError(t, err)
	require.Equal(t, wantSums(n), finalSums(got.Values()))
	require.Len(t, got.Values(), n)
	require.Positive(t, res.Checkpoints.Failed)
	var expired bool
	for _, c := range res.Checkpoints.History {
		expired = expired || errors.Is(c.Failure, coordinator.ErrExpired)
	}
	require.True(t, expired || errors.Is(res.Checkpoints.LatestFailed.Failure, coordinator.ErrExpired),
		"latest failure: %v", res.Checkpoints.LatestFailed.Failure)
}

// failingCommitter is an exactly-once sink whose pre-commit (part of the
// task's snapshot) fails once.
type failingCommitter struct {
	out     *[]string
	pending map[int][]string
	next    *atomic.Int64
	failed  *atomic.Bool
}

func (c *failingCommitter) Begin() (int, error) {
	id := int(c.next.Add(1))
	c.pending[id] = nil
	return id, nil
}
func (c *failingCommitter) Write(txn int, v string) error {
	c.pending[txn] = append(c.pending[txn], v)
	return nil
}
func (c *failingCommitter) PreCommit(txn int) error {
	if len(c.pending[txn]) > 0 && c.failed.CompareAndSwap(false, true) {
		return fmt.Errorf("pre-commit of transaction %d: injected", txn)
	}
	return nil
}
func (c *failingCommitter) Commit(txn int) error { return nil }
func (c *failingCommitter) Abort(txn int) error  { return nil }

// A task whose snapshot fails fails the job; it recovers from the last
// checkpoint, and a file pipeline stays exactly once.
func TestTaskFailingDuringSnapshotRecovers(t *testing.T) {
	storagetest.Run(t, func(t *testing.T, s *storagetest.Storage) {
		dir := t.TempDir()
		out := filepath.Join(dir, "out")
		const n = 50000
		var failed atomic.Bool
		env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
			weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, Dir: s.Root()}))
		src := weir.FromGenerator(env, n, func(i int64) string { return fmt.Sprint(i) })
		fail := weir.Map(src, func(s string) string { return s }).Name("pass")
		weir.FileSink(fail, out, func(s string) []byte { return []byte(s) })
		// A second sink whose pre-commit fails once.
		var next atomic.Int64
		weir.TwoPhaseCommitSink(src, codec.Int(), func(int, int) (weir.TwoPhaseCommitter[string, int], error) {
			return &failingCommitter{pending: map[int][]string{}, next: &next, failed: &failed}, nil
		})
		res, err := env.Execute(testCtx(t))
		require.NoError(t, err)
		require.True(t, failed.Load())
		require.GreaterOrEqual(t, res.Restarts, 1)
		lines := committedLines(t, out)
		require.Len(t, lines, n, "exactly once")
	})
}
