package upgradetest_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/coordinator"
)

// version is one version of a job for the upgrade tests of the other
// operators: build adds it to env, its output lines written into out
// (an exactly-once sink), with th (never nil) throttling v1 once it is
// halfway; opts are its options (parallelism, …).
type version struct {
	build func(env *weir.Environment, out string, th *throttle)
	opts  []weir.Option
}

// throttle closes reached after `at` values went through it and from then
// on slows the job down, so that v1 is still running when the test takes
// its savepoint. v2's throttle (reached nil) lets everything through.
type throttle struct {
	at      int64
	reached chan struct{}
	seen    atomic.Int64
	once    sync.Once
}

func (th *throttle) pass() {
	if th.reached != nil && th.seen.Add(1) >= th.at {
		th.once.Do(func() { close(th.reached) })
		time.Sleep(100 * time.Microsecond) // throttle, not synchronisation
	}
}

// throttled passes s through th, on one subtask (so that the order of s's
// values stays as its one source subtask read them).
func throttled[T any](s *weir.Stream[T], th *throttle) *weir.Stream[T] {
	return weir.Map(s, func(v T) T { th.pass(); return v }).Parallelism(1)
}

func (v version) options(ckpt time.Duration, extra ...weir.Option) []weir.Option {
	opts := []weir.Option{weir.WithBufferTimeout(time.Millisecond), weir.WithCheckpointing(weir.CheckpointConfig{Interval: ckpt})}
	opts = append(opts, v.opts...)
	return append(opts, extra...)
}

// takeSavepointOf runs v1 and stops it at a savepoint once `at` values
// went through its throttle: with StopWithSavepoint (checkpoints every
// 20 ms, the savepoint commits), or with TriggerSavepoint and a cancel (no
// checkpoint: the job restored from the savepoint commits its
// transactions).
func takeSavepointOf(t *testing.T, stop bool, at int64, v1 version) savepoint {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	ckpt := time.Hour
	if stop {
		ckpt = 20 * time.Millisecond
	}
	env := weir.NewEnvironment(v1.options(ckpt)...)
	th := &throttle{at: at, reached: make(chan struct{})}
	v1.build(env, out, th)
	return stopAtSavepoint(t, env, stop, untilClosed(th.reached), dir, out)
}

// untilClosed waits until ch is closed or ctx is done.
func untilClosed(ch chan struct{}) func(context.Context, *weir.Job) bool {
	return func(ctx context.Context, _ *weir.Job) bool {
		select {
		case <-ch:
			return true
		case <-ctx.Done():
			return false
		}
	}
}

// stopAtSavepoint starts the job of env, and once ready returns true takes
// a savepoint into dir/sp and stops the job (see takeSavepointOf); it
// returns the savepoint and what the output directory out held then.
func stopAtSavepoint(t *testing.T, env *weir.Environment, stop bool, ready func(context.Context, *weir.Job) bool, dir, out string) savepoint {
	ctx := testCtx(t)
	job, err := env.Start(ctx)
	require.NoError(t, err)
	if !ready(ctx, job) {
		job.Cancel()
		_, err := job.Wait()
		t.Fatalf("v1 never reached its savepoint: %v", errors.Join(context.Cause(ctx), err))
	}
	var sp string
	if stop {
		sp, err = job.StopWithSavepoint(ctx, filepath.Join(dir, "sp"))
		require.NoError(t, err)
		_, err = job.Wait()
		require.NoError(t, err)
	} else {
		sp, err = job.TriggerSavepoint(ctx, filepath.Join(dir, "sp"))
		require.NoError(t, err)
		job.Cancel()
		_, err = job.Wait()
		require.ErrorIs(t, err, context.Canceled)
	}
	s := savepoint{path: sp, files: map[string][]byte{}, out: out}
	entries, err := os.ReadDir(out)
	if !errors.Is(err, fs.ErrNotExist) { // a job without a file sink has no output directory
		require.NoError(t, err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(out, e.Name()))
		require.NoError(t, err)
		s.files[e.Name()] = b
	}
	return s
}

// restoreOf runs v2 from the savepoint (without restarts) and returns the
// committed output of both versions, sorted, what it logged at Warn and
// above, and its error.
func (s savepoint) restoreOf(t *testing.T, v2 version, extra ...weir.Option) ([]string, *observer.ObservedLogs, error) {
	s.reset(t)
	core, logs := observer.New(zap.WarnLevel)
	env := weir.NewEnvironment(v2.options(20*time.Millisecond, append([]weir.Option{weir.WithLogger(zap.New(core)),
		weir.WithRestoreFrom(s.path), weir.WithRestartStrategy(coordinator.NoRestart{})}, extra...)...)...)
	v2.build(env, s.out, &throttle{})
	_, err := env.Execute(testCtx(t))
	got := committed(t, s.out)
	slices.Sort(got)
	return got, logs, err
}

// uninterrupted is the committed output of v run from start to end,
// sorted: what v1 and v2 together must commit.
func uninterrupted(t *testing.T, v version) []string {
	out := filepath.Join(t.TempDir(), "out")
	env := weir.NewEnvironment(v.options(20 * time.Millisecond)...)
	v.build(env, out, &throttle{})
	_, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	got := committed(t, out)
	slices.Sort(got)
	require.NotEmpty(t, got)
	return got
}

// modes are the two ways of stopping v1 at a savepoint.
var modes = []struct {
	name string
	stop bool
}{{"StopWithSavepoint", true}, {"TriggerSavepoint+Cancel", false}}

// seqReader reads 0, 1, …, n-1 on one subtask; its position is the next
// value.
type seqReader struct{ next, n int64 }

func (r *seqReader) Next() (int64, bool, error) {
	if r.next >= r.n {
		return 0, false, nil
	}
	r.next++
	return r.next - 1, true, nil
}

func (r *seqReader) Position() ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, uint64(r.next)), nil
}

func (r *seqReader) Seek(pos []byte) error {
	if len(pos) != 8 {
		return errors.New("seqReader: bad position")
	}
	r.next = int64(binary.BigEndian.Uint64(pos))
	return nil
}
