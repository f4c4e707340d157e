package weir_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/storagetest"
)

// lenReader reads (i%37, i) for i = sub, sub+par, … below end, counting
// what it emits, and then holds its end back (polling every millisecond,
// without blocking its task) while hold returns true. Its position is
// checkpointed.
type lenReader struct {
	i, step, end int64
	emitted      *atomic.Int64
	ended        *atomic.Bool
	hold         func() bool
	pace         func()     // nil, or called before each value
	held         heldReader // for its Available
}

func (r *lenReader) Poll() ([2]int64, weir.ReadStatus, error) {
	if r.i < r.end {
		if r.pace != nil {
			r.pace()
		}
		v := [2]int64{r.i % 37, r.i}
		r.i += r.step
		r.emitted.Add(1)
		return v, weir.Read, nil
	}
	r.ended.Store(true)
	if r.hold != nil && r.hold() {
		return [2]int64{}, weir.NothingAvailable, nil
	}
	return [2]int64{}, weir.EndOfInput, nil
}

func (r *lenReader) Available() <-chan struct{} { return r.held.Available() }

func (r *lenReader) Close() error { return r.held.Close() }

func (r *lenReader) Position() ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, uint64(r.i)), nil
}

func (r *lenReader) Seek(pos []byte) error {
	if len(pos) != 8 {
		return fmt.Errorf("position of %d bytes", len(pos))
	}
	r.i = int64(binary.BigEndian.Uint64(pos))
	return nil
}

// unevenJob is a job whose two source subtasks have very different
// lengths: subtask 0 reads short values, subtask 1 long ones, at most 32
// a millisecond while hold says so, and holds its end while hold says so. Source -> map (fail, if not nil, may fail a
// record) -> keyBy -> slow running sum -> collect.
type unevenJob struct {
	emitted [2]atomic.Int64 // per source subtask, over all attempts
	ended   [2]atomic.Bool
	got     *weir.Collected[[2]int64]
}

func newUnevenJob(env *weir.Environment, short, long int64, hold func() bool, fail func(v [2]int64) error) *unevenJob {
	j := &unevenJob{}
	src := weir.FromPollingReader(env, "uneven source", func(sub, par int) (weir.PollingReader[[2]int64], error) {
		r := &lenReader{i: int64(sub), step: int64(par), end: short*int64(par) + int64(sub), emitted: &j.emitted[sub], ended: &j.ended[sub]}
		if sub == 1 {
			r.end, r.hold = long*int64(par)+int64(sub), hold
			if hold != nil {
				// While held, also slowly: a test waiting for checkpoints
				// after source 0's end needs values of this source then,
				// however fast the machine and however much the exchange
				// buffers.
				r.pace = func() {
					if r.i%64 == 1 && hold() {
						time.Sleep(time.Millisecond)
					}
				}
			}
		}
		return r, nil
	}).WithCodec(pairCodec)
	m := weir.MapErr(src, func(v [2]int64) ([2]int64, error) {
		if fail != nil {
			return v, fail(v)
		}
		return v, nil
	}).Name("maybe fail").WithCodec(pairCodec)
	sums := weir.Process(weir.KeyBy(m, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
		func() weir.KeyedProcessFunction[int64, [2]int64, [2]int64] {
			var sum interface {
				Value() (int64, error)
				Update(int64) error
			}
			slow := &pacer{d: 5 * time.Microsecond}
			return weir.ProcessFunc(func(rc *weir.RuntimeContext) error {
				st, err := weir.ValueState(rc, "sum", codec.Int64())
				sum = st
				return err
			}, func(k int64, v [2]int64, out *weir.Collector[[2]int64]) error {
				slow.step()
				s, err := sum.Value()
				if err != nil {
					return err
				}
				s += v[1]
				if err := sum.Update(s); err != nil {
					return err
				}
				out.Emit([2]int64{k, s})
				return nil
			})
		}).Name("sum").WithCodec(pairCodec)
	j.got, _ = weir.Collect(sums)
	return j
}

// wantUneven is the final sum per key of the two sources.
func wantUneven(short, long int64) map[int64]int64 {
	want := map[int64]int64{}
	for k := int64(0); k < short; k++ {
		want[(2*k)%37] += 2 * k
	}
	for k := int64(0); k < long; k++ {
		want[(2*k+1)%37] += 2*k + 1
	}
	return want
}

// A job whose sources have very different lengths keeps completing
// checkpoints after its first source finished, records that source as
// finished in them, and, killed after that, restores from such a
// checkpoint: the finished source does not run again, and the result is
// exact.
func TestCheckpointsAfterSourcesFinish(t *testing.T) {
	const short, long = 2000, 40000
	forEachTransport(t, func(t *testing.T, tr weir.Option) {
		st := newWatchedStorage()
		var (
			job         atomic.Pointer[weir.Job]
			afterFinish atomic.Int64 // completed checkpoints when source 0 had finished
			killed      atomic.Bool
			j           *unevenJob
		)
		afterFinish.Store(-1)
		// Fails one record of source 1 once source 0 finished and two
		// checkpoints completed since (the second started after the
		// finish was known, so it records source 0 finished).
		fail := func(v [2]int64) error {
			if killed.Load() || v[1]%2 == 0 || !j.ended[0].Load() {
				return nil
			}
			jb := job.Load()
			if jb == nil {
				// Source 0 can finish before Start has returned (a loaded
				// machine): calling the nil job's method panicked, a second
				// failure, and the job restarted twice.
				return nil
			}
			c := int64(jb.CheckpointStats().Completed)
			if afterFinish.CompareAndSwap(-1, c) {
				return nil
			}
			if c >= afterFinish.Load()+2 && st.finished.Load() > 0 && killed.CompareAndSwap(false, true) {
				return fmt.Errorf("injected failure at %d", v[1])
			}
			return nil
		}
		core, logs := observer.New(zap.WarnLevel)
		env := weir.NewEnvironment(tr, weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond), weir.WithLogger(zap.New(core)),
			weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, Storage: st}))
		j = newUnevenJob(env, short, long, func() bool { return !killed.Load() }, fail)
		jb, err := env.Start(testCtx(t))
		require.NoError(t, err)
		job.Store(jb)
		res, err := jb.Wait()
		require.NoError(t, err)
		require.True(t, killed.Load())
		require.Equal(t, 1, res.Restarts, "the warnings: %v", warnings(logs))
		require.Equal(t, wantUneven(short, long), finalSums(j.got.Values()))
		require.Len(t, j.got.Values(), short+long, "one output per input")
		require.EqualValues(t, short, j.emitted[0].Load(), "the finished source did not replay")
		require.Greater(t, int64(res.Checkpoints.Completed), afterFinish.Load()+1, "checkpoints after the first source finished")
		require.Zero(t, res.LeakedSegments)
	})
}

// warnings returns the logged warnings with their errors.
func warnings(logs *observer.ObservedLogs) []string {
	var out []string
	for _, e := range logs.All() {
		out = append(out, fmt.Sprintf("%s %v", e.Message, e.ContextMap()["error"]))
	}
	return out
}

// A savepoint taken after the first source finished records it as
// finished; a job restored from it does not run that source again and
// produces exactly the answer.
func TestSavepointAfterSourceFinished(t *testing.T) {
	const short, long = 2000, 40000
	storagetest.Run(t, func(t *testing.T, s *storagetest.Storage) {
		spDir := s.Savepoints()
		var (
			hold = atomic.Bool{}
			ctx  = testCtx(t)
		)
		hold.Store(true)
		env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
			weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour, Dir: s.Root()}))
		j := newUnevenJob(env, short, long, hold.Load, nil)
		job, err := env.Start(ctx)
		require.NoError(t, err)
		// Once source 0 finished and the coordinator knows (a checkpoint can
		// no longer expect it), take the savepoint while source 1 holds.
		var sp string
		require.Eventually(t, func() bool {
			if !j.ended[0].Load() || !j.ended[1].Load() {
				return false
			}
			p, err := job.TriggerSavepoint(ctx, spDir)
			if err != nil {
				return false
			}
			sp = p
			return true
		}, time.Minute, 5*time.Millisecond)
		m, err := s.OpenSavepoint(sp)
		require.NoError(t, err)
		finished := 0
		for k, ts := range m.Tasks {
			if ts.Finished {
				finished++
				require.Equal(t, 0, k.Subtask, "only source 0 finished: %v", k)
			}
			require.Nil(t, ts.Channels, "savepoints are aligned")
		}
		require.Equal(t, 1, finished)
		job.Cancel()
		_, err = job.Wait()
		require.ErrorIs(t, err, context.Canceled)

		env2 := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
			weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}), weir.WithRestoreFrom(sp))
		j2 := newUnevenJob(env2, short, long, nil, nil)
		res, err := env2.Execute(ctx)
		require.NoError(t, err)
		require.Equal(t, wantUneven(short, long), finalSums(j2.got.Values()))
		require.Len(t, j2.got.Values(), short+long)
		require.Zero(t, j2.emitted[0].Load(), "the finished source does not run again")
		require.Zero(t, res.LeakedSegments)
	})
}

// A two-phase-commit sink commits everything up to the end of its input
// through a final checkpoint, taken when its input ended even though the
// next periodic checkpoint is an hour away.
func TestFinalCheckpointCommitsSink(t *testing.T) {
	const n = 20000
	storagetest.Run(t, func(t *testing.T, s *storagetest.Storage) {
		dir := t.TempDir()
		out := filepath.Join(dir, "out")
		env := weir.NewEnvironment(weir.WithParallelism(2),
			weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour, Dir: s.Root()}))
		weir.FileSink(weir.FromGenerator(env, n, func(i int64) string { return fmt.Sprint(i) }), out, func(s string) []byte { return []byte(s) })
		res, err := env.Execute(testCtx(t))
		require.NoError(t, err)
		require.Len(t, committedLines(t, out), n)
		require.Positive(t, res.Checkpoints.Completed, "the final checkpoint")
	})
}

// A source restored as finished still lets event time advance: it sends
// the maximum watermark before its end, as it did when it ran, so the
// windows downstream fire after a restore from a checkpoint taken after
// it finished. Windows of 1,000 (values are their own timestamps) sum per
// key of the uneven job's sources; killed after source 0 finished, the
// output equals the batch answer.
func TestWindowsFireAfterRestoreWithFinishedSource(t *testing.T) {
	const short, long = 2000, 20000
	st := newWatchedStorage()
	var (
		job    atomic.Pointer[weir.Job]
		killed atomic.Bool
		ended  [2]atomic.Bool
		since  atomic.Int64 // completed checkpoints when source 0 had finished
	)
	since.Store(-1)
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, Storage: st}))
	var emitted [2]atomic.Int64
	src := weir.FromPollingReader(env, "uneven source", func(sub, par int) (weir.PollingReader[[2]int64], error) {
		r := &lenReader{i: int64(sub), step: int64(par), end: short*int64(par) + int64(sub), emitted: &emitted[sub], ended: &ended[sub],
			hold: func() bool { return false }}
		if sub == 1 {
			// The failure needs values of this source after two
			// checkpoints that follow source 0's end: this source must
			// not run out of them first, however fast the machine.
			r.end = long*int64(par) + int64(sub)
			r.hold = func() bool { return !killed.Load() }
			r.pace = func() {
				if !killed.Load() && r.i%64 == 1 {
					time.Sleep(time.Millisecond)
				}
			}
		}
		return r, nil
	}).WithCodec(pairCodec)
	stamped := weir.AssignTimestamps(src, weir.MonotonousTimestamps(func(v [2]int64) int64 { return v[1] }))
	m := weir.MapErr(stamped, func(v [2]int64) ([2]int64, error) {
		if killed.Load() || v[1]%2 == 0 || !ended[0].Load() {
			return v, nil
		}
		jb := job.Load()
		if jb == nil {
			return v, nil // Start has not returned yet
		}
		c := int64(jb.CheckpointStats().Completed)
		if since.CompareAndSwap(-1, c) {
			return v, nil
		}
		if c >= since.Load()+2 && st.finished.Load() > 0 && killed.CompareAndSwap(false, true) {
			return v, fmt.Errorf("injected failure at %d", v[1])
		}
		return v, nil
	}).WithCodec(pairCodec)
	sums := weir.WindowReduce(weir.Window(weir.KeyBy(m, func(v [2]int64) int64 { return v[0] }, codec.Int64()), weir.TumblingWindows(time.Second)),
		func(a, v [2]int64) [2]int64 { return [2]int64{a[0], a[1] + v[1]} })
	got, _ := weir.Collect(weir.Map(sums, func(w weir.Windowed[int64, [2]int64]) [2]int64 {
		return [2]int64{w.Key*1_000_000 + w.Window.Start, w.Value[1]}
	}).WithCodec(pairCodec))
	jb, err := env.Start(testCtx(t))
	require.NoError(t, err)
	job.Store(jb)
	res, err := jb.Wait()
	require.NoError(t, err)
	require.True(t, killed.Load(), "the failure fired")
	require.Equal(t, 1, res.Restarts)

	want := map[int64]int64{}
	for sub, n := range [2]int64{short, long} {
		for k := range n {
			v := 2*k + int64(sub)
			want[(v%37)*1_000_000+v/1000*1000] += v
		}
	}
	have := map[int64]int64{}
	for _, v := range got.Values() {
		_, dup := have[v[0]]
		require.False(t, dup, "window %d emitted twice", v[0])
		have[v[0]] = v[1]
	}
	require.Equal(t, want, have)
	require.EqualValues(t, short, emitted[0].Load(), "the finished source did not replay")
}
