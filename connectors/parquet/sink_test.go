package parquet_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connectors/parquet"
)

// A job whose tasks fail twice (a panic in the map before the sink, with
// the sink at parallelism 2 behind a rebalance): the committed part files,
// read back with parquet-go, hold every event exactly once, each in the
// bucket of its event-time hour, and no hidden file is left.
func TestExactlyOnceUnderTaskFailures(t *testing.T) {
	const n = 30000
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, Dir: filepath.Join(dir, "chk")}),
		weir.WithRestartStrategy(weir.FixedDelayRestart(5, 0)))
	var seen, failures atomic.Int64
	src := weir.AssignTimestamps(weir.FromGenerator(env, n, genEvent).WithCodec(eventCodec),
		weir.BoundedOutOfOrderness(time.Second, func(e event) int64 { return e.Time }))
	m := weir.Map(src, func(e event) event {
		if c := seen.Add(1); (c == 9000 || c == 22000) && failures.Add(1) <= 2 {
			panic("injected")
		}
		return e
	}).WithCodec(eventCodec).Rebalance()
	parquet.Sink(m, parquet.Config[event]{Dir: out})
	res, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, 2, res.Restarts)

	files, hidden := readCommitted(t, out)
	require.Empty(t, hidden, "hidden files left")
	requireExactlyOnce(t, files, n)
	buckets := map[string]bool{}
	for _, f := range files {
		b := filepath.Dir(f.rel)
		buckets[b] = true
		for _, e := range f.events {
			require.Equal(t, time.UnixMilli(e.Time).UTC().Format("2006-01-02--15"), b, "event %d in %s", e.ID, f.rel)
		}
		require.Regexp(t, `^part-[0-9a-f-]{36}-[01]-\d+\.parquet$`, filepath.Base(f.rel))
	}
	require.Len(t, buckets, (n+3599)/3600)
}

// A user bucket function, rolling by size: every part file stops at
// RollSize (plus a batch of values and the footer, which parquet-go's
// size estimate leaves out), and the events still
// arrive exactly once. The checkpoint interval is long: only the sizes and
// the final checkpoint roll.
func TestRollBySize(t *testing.T) {
	const n, rollSize, slack = 60000, 64 << 10, 16 << 10
	out := t.TempDir()
	env := weir.NewEnvironment(weir.WithParallelism(2),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
	src := weir.FromGenerator(env, n, genEvent).WithCodec(eventCodec)
	parquet.Sink(src, parquet.Config[event]{Dir: out, RollSize: rollSize, RowGroupSize: 16 << 10,
		Bucket: func(e event, _ int64) string { return "key=" + e.Key[:2] }})
	_, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	files, hidden := readCommitted(t, out)
	require.Empty(t, hidden)
	requireExactlyOnce(t, files, n)
	var total int64
	for _, f := range files {
		require.LessOrEqual(t, f.size, int64(rollSize+slack), f.rel)
		require.True(t, strings.HasPrefix(f.rel, "key=k"), f.rel)
		total += f.size
	}
	// Each of the 2 subtasks × 9 buckets ends with one short file.
	require.GreaterOrEqual(t, len(files), int(total/(rollSize+slack)))
	require.Greater(t, len(files), 2*9, "no file rolled by size")
}

// Rolling by time on a clock the records drive: event i comes at virtual
// millisecond i, and a part file rolls once it is open RollInterval, so
// no file spans more than RollInterval plus the records between two looks
// at the clock.
func TestRollByTime(t *testing.T) {
	const n, interval = 20000, 1000 // ms
	out := t.TempDir()
	env := weir.NewEnvironment(weir.WithParallelism(1),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
	var now atomic.Int64
	src := weir.Map(weir.FromGenerator(env, n, genEvent).WithCodec(eventCodec), func(e event) event {
		now.Store(e.ID) // chained with the sink: its clock reads this record's time
		return e
	})
	cfg := parquet.Config[event]{Dir: out, RollInterval: interval * time.Millisecond,
		Bucket: func(event, int64) string { return "" }}
	parquet.SetClock(&cfg, func() time.Time { return time.UnixMilli(now.Load()) })
	parquet.Sink(src, cfg)
	_, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	files, hidden := readCommitted(t, out)
	require.Empty(t, hidden)
	requireExactlyOnce(t, files, n)
	require.GreaterOrEqual(t, len(files), n/(interval+parquet.ClockEvery))
	for _, f := range files {
		first, last := f.events[0].ID, f.events[len(f.events)-1].ID
		require.Less(t, last-first, int64(interval+parquet.ClockEvery), f.rel)
	}
}

// A savepoint taken by stopping a job at parallelism 3 (checkpoints every
// 10 ms), and a job restored from it at parallelism 2: the two jobs'
// committed files hold every event exactly once. Hidden files the first
// job's subtasks left (planted here: one of subtask 2, which has no
// successor at parallelism 2) are removed; another prefix's are not.
func TestSavepointRescaleExactlyOnce(t *testing.T) {
	const n = 60000
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	build := func(p int, throttle bool, opts ...weir.Option) (*weir.Environment, chan struct{}) {
		env := weir.NewEnvironment(append([]weir.Option{weir.WithParallelism(p), weir.WithBufferTimeout(time.Millisecond),
			weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond})}, opts...)...)
		reached := make(chan struct{})
		var seen atomic.Int64
		var once sync.Once
		src := weir.AssignTimestamps(weir.FromGenerator(env, n, genEvent).WithCodec(eventCodec),
			weir.MonotonousTimestamps(func(e event) int64 { return e.Time }))
		slow := weir.Map(src, func(e event) event {
			if throttle && seen.Add(1) >= 20000 {
				once.Do(func() { close(reached) })
				time.Sleep(20 * time.Microsecond) // throttle, not synchronisation
			}
			return e
		}).WithCodec(eventCodec)
		parquet.Sink(slow, parquet.Config[event]{Dir: out}).UID("parquet-out")
		return env, reached
	}
	env, reached := build(3, true)
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)
	<-reached
	sp, err := job.StopWithSavepoint(testCtx(t), filepath.Join(dir, "sp"))
	require.NoError(t, err)
	_, err = job.Wait()
	require.NoError(t, err)
	files, _ := readCommitted(t, out)
	require.NotEmpty(t, files)

	stale := filepath.Join(out, "2026-01-02--03", ".part-3f2a4c1e-0d5b-4c6e-9a7f-1b2c3d4e5f60-2-7.parquet.inprogress")
	other := filepath.Join(out, "2026-01-02--03", ".other-3f2a4c1e-0d5b-4c6e-9a7f-1b2c3d4e5f60-2-7.parquet.inprogress")
	mustWrite(t, stale)
	mustWrite(t, other)
	env2, _ := build(2, false, weir.WithRestoreFrom(sp))
	_, err = env2.Execute(testCtx(t))
	require.NoError(t, err)
	files, hidden := readCommitted(t, out)
	requireExactlyOnce(t, files, n)
	require.Equal(t, []string{filepath.Join("2026-01-02--03", filepath.Base(other))}, hidden)
}

// Configuration the sink cannot work with fails Execute before any record
// is read, naming the sink and what is wrong.
func TestBadConfigFailsExecute(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	type noColumns struct{ x int }
	type badField struct {
		C chan int
	}
	for _, tc := range []struct {
		name, want string
		attach     func(env *weir.Environment, read *atomic.Int64)
	}{
		{"dir under a file", "is not a directory", func(env *weir.Environment, read *atomic.Int64) {
			parquet.Sink(source(env, read), parquet.Config[event]{Dir: filepath.Join(file, "out")})
		}},
		{"dir is a file", "is not a directory", func(env *weir.Environment, read *atomic.Int64) {
			parquet.Sink(source(env, read), parquet.Config[event]{Dir: file})
		}},
		{"no dir", "no Dir", func(env *weir.Environment, read *atomic.Int64) {
			parquet.Sink(source(env, read), parquet.Config[event]{})
		}},
		{"negative size", "negative", func(env *weir.Environment, read *atomic.Int64) {
			parquet.Sink(source(env, read), parquet.Config[event]{Dir: t.TempDir(), RollSize: -1})
		}},
		{"hidden prefix", "readers would skip", func(env *weir.Environment, read *atomic.Int64) {
			parquet.Sink(source(env, read), parquet.Config[event]{Dir: t.TempDir(), PartPrefix: "_part"})
		}},
		{"no columns", "has no Parquet schema", func(env *weir.Environment, read *atomic.Int64) {
			parquet.Sink(weir.Map(source(env, read), func(event) noColumns { return noColumns{} }), parquet.Config[noColumns]{Dir: t.TempDir()})
		}},
		{"unsupported field", "has no Parquet schema", func(env *weir.Environment, read *atomic.Int64) {
			parquet.Sink(weir.Map(source(env, read), func(event) badField { return badField{} }), parquet.Config[badField]{Dir: t.TempDir()})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := weir.NewEnvironment(weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
			var read atomic.Int64
			tc.attach(env, &read)
			_, err := env.Execute(testCtx(t))
			require.ErrorContains(t, err, "parquet: sink")
			require.ErrorContains(t, err, tc.want)
			require.Zero(t, read.Load(), "records were read")
		})
	}
}

func source(env *weir.Environment, read *atomic.Int64) *weir.Stream[event] {
	return weir.Map(weir.FromGenerator(env, 100, genEvent).WithCodec(eventCodec), func(e event) event {
		read.Add(1)
		return e
	}).WithCodec(eventCodec)
}

// A bucket function returning a path outside Dir fails the job with the
// bucket in the error, and writes nothing outside Dir.
func TestBadBucketFailsJob(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	env := weir.NewEnvironment(weir.WithRestartStrategy(weir.NoRestart()),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond}))
	src := weir.FromGenerator(env, 1000, genEvent).WithCodec(eventCodec)
	parquet.Sink(src, parquet.Config[event]{Dir: out, Bucket: func(e event, _ int64) string {
		if e.ID == 500 {
			return "../escape"
		}
		return "ok"
	}})
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, `bucket "../escape" is not a relative directory inside Dir`)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		require.Contains(t, []string{"out"}, e.Name())
	}
}

// Cancelling a running job leaves no committed file of an incomplete
// checkpoint and returns promptly.
func TestCancel(t *testing.T) {
	out := t.TempDir()
	env := weir.NewEnvironment(weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
	src := weir.FromGenerator(env, 1<<40, genEvent).WithCodec(eventCodec)
	parquet.Sink(src, parquet.Config[event]{Dir: out})
	ctx, cancel := context.WithTimeout(testCtx(t), 300*time.Millisecond)
	defer cancel()
	_, err := env.Execute(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	files, _ := readCommitted(t, out)
	require.Empty(t, files, "no checkpoint completed, so nothing is committed")
}

// A directory the sink writes into replaced by a file while the job runs
// (what a permission error looks like to the sink, testable as root):
// the job fails with an error naming the sink and the path, and nothing
// of the failed checkpoint is committed.
func TestDirReplacedByFileFailsJob(t *testing.T) {
	out := t.TempDir()
	env := weir.NewEnvironment(weir.WithRestartStrategy(weir.NoRestart()),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
	src := weir.FromGenerator(env, 1000, genEvent).WithCodec(eventCodec)
	late := filepath.Join(out, "late")
	parquet.Sink(src, parquet.Config[event]{Dir: out, Bucket: func(e event, _ int64) string {
		if e.ID == 500 {
			// The bucket's directory is a file by the time the sink
			// first needs it.
			if err := os.WriteFile(late, []byte("not a directory"), 0o644); err != nil {
				panic(err)
			}
			return "late"
		}
		return "early"
	}})
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, "parquet: sink")
	require.ErrorContains(t, err, "bucket directory")
	require.ErrorContains(t, err, late)
	files, _ := readCommitted(t, filepath.Join(out, "early"))
	require.Empty(t, files, "no checkpoint completed, so nothing is committed")
}
