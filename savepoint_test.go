package weir_test

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/storagetest"
	"github.com/weirstream/weir/state"
)

// throttledSumJob is keyedSumJob's graph with a map that closes reached
// after `at` records and from then on slows down, so that the job is still
// running when the test acts on it.
func throttledSumJob(env *weir.Environment, n, at int64, reached chan struct{}) *weir.Collected[[2]int64] {
	var seen atomic.Int64
	src := weir.FromGenerator(env, n, func(i int64) [2]int64 { return [2]int64{i % 37, i} }).WithCodec(pairCodec)
	m := weir.Map(src, func(v [2]int64) [2]int64 {
		switch c := seen.Add(1); {
		case c == at && reached != nil:
			close(reached)
		case c > at && reached != nil:
			time.Sleep(20 * time.Microsecond) // throttle, not synchronisation
		}
		return v
	}).Name("throttle").WithCodec(pairCodec)
	sums := weir.Reduce(weir.KeyBy(m, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
		func(a, b [2]int64) [2]int64 { return [2]int64{a[0], a[1] + b[1]} }).Name("sum")
	got, _ := weir.Collect(sums)
	return got
}

func wantSums(n int64) map[int64]int64 {
	want := map[int64]int64{}
	for i := int64(0); i < n; i++ {
		want[i%37] += i
	}
	return want
}

func finalSums(vs [][2]int64) map[int64]int64 {
	final := map[int64]int64{}
	for _, v := range vs {
		final[v[0]] = max(final[v[0]], v[1])
	}
	return final
}

// savepointOf runs the throttled job at parallelism p with checkpoints on
// s, takes a savepoint into a fresh target of s once at records went
// through, cancels the job and returns the savepoint's location and the
// job's result.
func savepointOf(t *testing.T, s *storagetest.Storage, p int, n, at int64) (string, *weir.Result) {
	t.Helper()
	// A long interval: only the manual savepoint is taken.
	env := weir.NewEnvironment(weir.WithParallelism(p), weir.WithBufferTimeout(time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour, Dir: s.Root()}))
	reached := make(chan struct{})
	throttledSumJob(env, n, at, reached)
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)
	<-reached
	sp, err := job.TriggerSavepoint(testCtx(t), s.Savepoints())
	require.NoError(t, err)
	require.True(t, s.Exists(sp), "savepoint %s", sp)
	job.Cancel()
	res, err := job.Wait()
	require.ErrorIs(t, err, context.Canceled)
	return sp, res
}

// A savepoint of a running job, the job cancelled, a new job started from
// the savepoint: together they count every record exactly once.
func TestSavepointStopAndResume(t *testing.T) {
	const n, at = 100000, 30000
	storagetest.Run(t, func(t *testing.T, s *storagetest.Storage) {
		ps := []int{1, 2}
		if s.S3() {
			ps = ps[1:] // the storage's part does not depend on p
		}
		for _, p := range ps {
			sp, res := savepointOf(t, s, p, n, at)
			require.Equal(t, 1, res.Checkpoints.Completed)
			require.Equal(t, sp, res.Checkpoints.History[0].SavepointPath)

			ckpt := weir.CheckpointConfig{Interval: time.Hour, Dir: s.Root()}
			env2 := weir.NewEnvironment(weir.WithParallelism(p), weir.WithCheckpointing(ckpt),
				weir.WithRestoreFrom(sp), weir.WithBufferTimeout(time.Millisecond))
			got := throttledSumJob(env2, n, at, nil)
			res, err := env2.Execute(testCtx(t))
			require.NoError(t, err)
			require.Equal(t, wantSums(n), finalSums(got.Values()), "p=%d", p)
			require.Len(t, got.Values(), n, "p=%d: one output per input", p)
			require.Zero(t, res.LeakedSegments)
			// The savepoint is never deleted.
			require.True(t, s.Exists(sp))
		}
	})
}

// A retained checkpoint of a cancelled job resumes in a new job, which
// continues the checkpoint IDs in the same place.
func TestResumeFromRetainedCheckpoint(t *testing.T) {
	const n, at = 100000, 30000
	storagetest.Run(t, func(t *testing.T, s *storagetest.Storage) {
		root := s.Root()
		ckpt := weir.CheckpointConfig{Interval: time.Hour, Dir: root, RetainOnCancel: true}
		env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithCheckpointing(ckpt), weir.WithBufferTimeout(time.Millisecond))
		reached := make(chan struct{})
		throttledSumJob(env, n, at, reached)
		job, err := env.Start(testCtx(t))
		require.NoError(t, err)
		<-reached
		id, err := job.TriggerCheckpoint(testCtx(t))
		require.NoError(t, err)
		require.Equal(t, 1, job.CheckpointStats().Completed)
		job.Cancel()
		_, err = job.Wait()
		require.ErrorIs(t, err, context.Canceled)
		// The job got a job ID of its own and a place of its own under
		// root; the job restored from it keeps both.
		places := s.List(root)
		require.Len(t, places, 1)
		jobID := places[0]
		require.NotEmpty(t, jobID)
		require.True(t, s.Exists(s.Join(s.Checkpoint(root, jobID, id), state.MetadataFile)))
		if !s.S3() {
			fps, err := state.FindPlaces(state.OSFS{}, root)
			require.NoError(t, err)
			require.Len(t, fps, 1)
			require.Equal(t, jobID, fps[0].JobID)
		}
		// A directory (a prefix) holding one job's place restores from
		// that place.
		from := root

		env2 := weir.NewEnvironment(weir.WithParallelism(2), weir.WithCheckpointing(ckpt),
			weir.WithRestoreFrom(from), weir.WithBufferTimeout(time.Millisecond))
		got := throttledSumJob(env2, n, at, nil)
		job2, err := env2.Start(testCtx(t))
		require.NoError(t, err)
		id2, err := job2.TriggerCheckpoint(testCtx(t))
		if err == nil { // the job may already have finished
			require.Greater(t, id2, id, "checkpoint IDs continue after the restored one")
		}
		_, err = job2.Wait()
		require.NoError(t, err)
		require.Equal(t, wantSums(n), finalSums(got.Values()))
		require.Len(t, got.Values(), n)
		// No other place: a finished job discards its checkpoints, which
		// leaves an empty directory, and no object, behind.
		want := []string{jobID}
		if s.S3() {
			want = nil
		}
		require.Equal(t, want, s.List(root), "the restored job continued in the same place")
	})
}

// A checkpoint root holding the retained checkpoints of two jobs: a
// restore from the root is refused with an error naming each job's place
// (as a URL on object storage), and a restore from one place resumes it.
func TestRestoreFromRootOfSeveralJobs(t *testing.T) {
	const n, at = 20000, 5000
	storagetest.Run(t, func(t *testing.T, s *storagetest.Storage) {
		root := s.Root()
		ckpt := weir.CheckpointConfig{Interval: time.Hour, Dir: root, RetainOnCancel: true}
		for range 2 {
			env := weir.NewEnvironment(weir.WithCheckpointing(ckpt), weir.WithBufferTimeout(time.Millisecond))
			reached := make(chan struct{})
			throttledSumJob(env, n, at, reached)
			job, err := env.Start(testCtx(t))
			require.NoError(t, err)
			<-reached
			_, err = job.TriggerCheckpoint(testCtx(t))
			require.NoError(t, err)
			job.Cancel()
			_, err = job.Wait()
			require.ErrorIs(t, err, context.Canceled)
		}
		jobs := s.List(root)
		require.Len(t, jobs, 2)

		env := weir.NewEnvironment(weir.WithCheckpointing(ckpt), weir.WithRestoreFrom(root))
		throttledSumJob(env, n, at, nil)
		_, err := env.Execute(testCtx(t))
		var several *state.SeveralJobsError
		require.ErrorAs(t, err, &several)
		for _, j := range jobs {
			require.ErrorContains(t, err, s.Join(root, j)+" (newest chk-")
		}

		env = weir.NewEnvironment(weir.WithCheckpointing(ckpt), weir.WithRestoreFrom(s.Join(root, jobs[0])))
		got := throttledSumJob(env, n, at, nil)
		_, err = env.Execute(testCtx(t))
		require.NoError(t, err)
		require.Equal(t, wantSums(n), finalSums(got.Values()))
		require.Len(t, got.Values(), n)
	})
}

// A savepoint whose state file is corrupt fails the restore with an error
// naming the savepoint and the file (the object); a savepoint that is not
// there fails it too.
func TestRestoreFromCorruptSavepointFails(t *testing.T) {
	const n, at = 50000, 10000
	storagetest.Run(t, func(t *testing.T, s *storagetest.Storage) {
		ckpt := weir.CheckpointConfig{Interval: time.Hour, Dir: s.Root()}
		sp, _ := savepointOf(t, s, 2, n, at)
		bad := s.Corrupt(sp)
		env2 := weir.NewEnvironment(weir.WithParallelism(2), weir.WithCheckpointing(ckpt), weir.WithRestoreFrom(sp))
		throttledSumJob(env2, n, at, nil)
		_, err := env2.Execute(testCtx(t))
		require.Error(t, err)
		require.Contains(t, err.Error(), "restore from "+sp)
		var ce *state.CorruptError
		require.ErrorAs(t, err, &ce)
		require.Contains(t, err.Error(), path.Base(bad), "the file is named")

		missing := s.Join(s.Dir(sp), "missing")
		env3 := weir.NewEnvironment(weir.WithCheckpointing(ckpt), weir.WithRestoreFrom(missing))
		throttledSumJob(env3, n, at, nil)
		_, err = env3.Execute(testCtx(t))
		require.ErrorContains(t, err, missing)
		if s.S3() {
			require.ErrorIs(t, err, state.ErrNotFound)
		} else {
			require.ErrorIs(t, err, os.ErrNotExist)
		}
	})
}

func TestSavepointNeedsCheckpointing(t *testing.T) {
	env := weir.NewEnvironment()
	reached := make(chan struct{})
	throttledSumJob(env, 20000, 1000, reached)
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)
	<-reached
	_, err = job.TriggerSavepoint(testCtx(t), t.TempDir())
	require.ErrorIs(t, err, weir.ErrNoCheckpointing)
	job.Cancel()
	_, _ = job.Wait()

	env = weir.NewEnvironment(weir.WithRestoreFrom(t.TempDir()))
	throttledSumJob(env, 10, 1, nil)
	_, err = env.Execute(testCtx(t))
	require.ErrorContains(t, err, "needs WithCheckpointing")
}

// A savepoint taken at parallelism 2 restores into a job at parallelism 3
// and 1: keyed state moves by key group, source positions and the
// collected outputs by operator-state redistribution.
func TestSavepointRescales(t *testing.T) {
	const n, at = 100000, 30000
	storagetest.Run(t, func(t *testing.T, s *storagetest.Storage) {
		ckpt := weir.CheckpointConfig{Interval: time.Hour, Dir: s.Root()}
		sp, _ := savepointOf(t, s, 2, n, at)
		for _, p := range []int{3, 1} {
			env2 := weir.NewEnvironment(weir.WithParallelism(p), weir.WithCheckpointing(ckpt),
				weir.WithRestoreFrom(sp), weir.WithBufferTimeout(time.Millisecond))
			got := throttledSumJob(env2, n, at, nil)
			_, err := env2.Execute(testCtx(t))
			require.NoError(t, err, "p=%d", p)
			require.Equal(t, wantSums(n), finalSums(got.Values()), "p=%d", p)
			require.Len(t, got.Values(), n, "p=%d", p)
		}
	})
}

// Stop with a savepoint while checkpoints are taken every 10 ms, with an
// exactly-once file sink: the first job's committed output and the
// resumed job's together hold every record exactly once (with
// TriggerSavepoint and Cancel, a checkpoint completing in between would
// commit records the resumed job writes again).
func TestStopWithSavepointThenResumeIsExactlyOnce(t *testing.T) {
	const n = 200000
	storagetest.Run(t, func(t *testing.T, s *storagetest.Storage) {
		out := filepath.Join(t.TempDir(), "out")
		ckpt := weir.CheckpointConfig{Interval: 10 * time.Millisecond, Dir: s.Root()}
		build := func(throttle bool, opts ...weir.Option) (*weir.Environment, chan struct{}) {
			env := weir.NewEnvironment(append([]weir.Option{weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
				weir.WithCheckpointing(ckpt)}, opts...)...)
			reached := make(chan struct{})
			var seen atomic.Int64
			var once sync.Once
			src := weir.FromGenerator(env, n, func(i int64) string { return strconv.FormatInt(i, 10) })
			slow := weir.Map(src, func(s string) string {
				if throttle && seen.Add(1) >= 20000 {
					once.Do(func() { close(reached) })
					time.Sleep(20 * time.Microsecond) // throttle, not synchronisation
				}
				return s
			})
			weir.FileSink(slow, out, func(s string) []byte { return []byte(s) })
			return env, reached
		}
		env, reached := build(true)
		job, err := env.Start(testCtx(t))
		require.NoError(t, err)
		<-reached
		target := s.Savepoints()
		sp, err := job.StopWithSavepoint(testCtx(t), target)
		require.NoError(t, err)
		res, err := job.Wait()
		require.NoError(t, err, "a stopped job ends without error")
		require.Positive(t, res.Checkpoints.Completed)
		_, err = job.StopWithSavepoint(testCtx(t), target)
		require.Error(t, err, "the job is over")

		env2, _ := build(false, weir.WithRestoreFrom(sp))
		_, err = env2.Execute(testCtx(t))
		require.NoError(t, err)
		lines := committedLines(t, out)
		require.Len(t, lines, n)
		slices.Sort(lines)
		require.Equal(t, len(lines), len(slices.Compact(lines)), "no line twice")
	})
}
