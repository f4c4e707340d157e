package weir_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/storagetest"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// watchedStorage is checkpoint storage in memory that counts, in the
// metadata of completed checkpoints, the task snapshots holding channel
// state (in-flight data) and those of finished tasks.
type watchedStorage struct {
	*state.FileStorage
	channels, finished atomic.Int64
}

func newWatchedStorage() *watchedStorage {
	return &watchedStorage{FileStorage: state.NewMemoryStorage()}
}

func (s *watchedStorage) WriteMetadata(m state.Metadata) error {
	for _, ts := range m.Tasks {
		if ts.Channels != nil {
			s.channels.Add(1)
		}
		if ts.Finished {
			s.finished.Add(1)
		}
	}
	return s.FileStorage.WriteMetadata(m)
}

// pacer slows its caller to one call per d on average, sleeping every 64
// calls and never catching up after a pause: a slow operator that leaves
// the CPU to the others.
type pacer struct {
	d    time.Duration
	n    int
	next time.Time
}

func (p *pacer) step() {
	if p.n++; p.n%64 != 0 {
		return
	}
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	p.next = p.next.Add(64 * p.d)
	time.Sleep(p.next.Sub(now))
}

// orderedJob is the exactly-once kill job of TestExactlyOnceRecoveryFromInjectedFailures
// with a keyed stage 100 times slower than its source (so that the
// exchange is full when checkpoints are taken), which also checks that
// the records of each key from each source subtask arrive in order:
// source (i%37, i) -> map (fails on chosen records) -> keyBy -> ordered,
// slow process -> collect. It returns the collected records, the order
// violations seen, and the job's result.
func orderedJob(t *testing.T, tr weir.Option, cfg weir.CheckpointConfig, n int64, p int, failAt []int64, extra ...weir.Option) ([][2]int64, int64, *weir.Result) {
	t.Helper()
	env := weir.NewEnvironment(append([]weir.Option{tr, weir.WithParallelism(p), weir.WithCheckpointing(cfg), weir.WithBufferTimeout(time.Millisecond)}, extra...)...)
	var (
		processed   atomic.Int64
		next        atomic.Int64
		job         atomic.Pointer[weir.Job]
		completedAt atomic.Int64
		violations  atomic.Int64
	)
	var waited atomic.Int64 // polls of the held end since the last failure
	fire := func(c int64, force bool) (int64, bool) {
		k := next.Load()
		if int(k) >= len(failAt) || c < failAt[k] {
			return k, false
		}
		j := job.Load()
		if j == nil {
			return k, false
		}
		done := int64(j.CheckpointStats().Completed)
		if (done > completedAt.Load() || force) && next.CompareAndSwap(k, k+1) {
			completedAt.Store(done)
			waited.Store(0)
			return k, true
		}
		return k, false
	}
	release := func() error {
		if int(next.Load()) >= len(failAt) {
			return io.EOF
		}
		// Each failure waits for a completed checkpoint, but when none
		// completes (every one expires on a slow machine) it fires after
		// about two seconds of held input all the same.
		if k, ok := fire(math.MaxInt64, waited.Add(1) > 2000); ok {
			return fmt.Errorf("injected failure %d at the end of the input", k)
		}
		return nil
	}
	src := weir.FromPollingReader(env, "held source", func(sub, par int) (weir.PollingReader[[2]int64], error) {
		return &heldReader{i: int64(sub), step: int64(par), n: n, release: release}, nil
	}).WithCodec(pairCodec)
	m := weir.Map(src, func(v [2]int64) [2]int64 {
		c := processed.Add(1)
		if k, ok := fire(c, false); ok {
			panic(fmt.Sprintf("injected failure %d at record %d", k, c))
		}
		return v
	}).Name("faulty").WithCodec(pairCodec)
	ordered := weir.Process(weir.KeyBy(m, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
		func() weir.KeyedProcessFunction[int64, [2]int64, [2]int64] {
			var last interface {
				Value() ([2]int64, error)
				Update([2]int64) error
			}
			slow := &pacer{d: 5 * time.Microsecond}
			return weir.ProcessFunc(func(rc *weir.RuntimeContext) error {
				st, err := weir.ValueState(rc, "last", pairCodec)
				last = st
				return err
			}, func(_ int64, v [2]int64, out *weir.Collector[[2]int64]) error {
				slow.step()
				// last[s] is one more than the newest record seen from
				// source subtask s (p ≤ 2).
				seen, err := last.Value()
				if err != nil {
					return err
				}
				s := v[1] % int64(p)
				if v[1]+1 <= seen[s] {
					violations.Add(1)
				}
				seen[s] = v[1] + 1
				if err := last.Update(seen); err != nil {
					return err
				}
				out.Emit(v)
				return nil
			})
		}).Name("ordered").WithCodec(pairCodec)
	got, _ := weir.Collect(ordered)
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	job.Store(j)
	res, err := j.Wait()
	require.NoError(t, err)
	return got.Values(), violations.Load(), res
}

// requireExactlyOnce checks that out holds every record i < n once.
func requireExactlyOnce(t *testing.T, out [][2]int64, n int64) {
	t.Helper()
	is := make([]int64, 0, len(out))
	for _, v := range out {
		is = append(is, v[1])
	}
	slices.Sort(is)
	lost, dup := 0, 0
	for k, want := 0, int64(0); want < n || k < len(is); {
		switch {
		case k == len(is) || is[k] > want:
			lost++
			want++
		case is[k] < want:
			dup++
			k++
		default:
			k++
			want++
		}
	}
	require.Zero(t, lost, "records lost")
	require.Zero(t, dup, "records duplicated")
}

// The exactly-once kill tests with unaligned checkpoints, and with the
// aligned-checkpoint timeout at 0 and at a few ms, over in-process and TCP
// exchanges, with a keyed stage 100 times slower than the source: nothing
// lost, nothing duplicated, the records of each channel in order, no
// network buffer leaked.
func TestUnalignedExactlyOnceKills(t *testing.T) {
	const n = 40000
	for _, tr := range transports {
		for _, mode := range []struct {
			name string
			cfg  weir.CheckpointConfig
		}{
			{"unaligned", weir.CheckpointConfig{Interval: 10 * time.Millisecond, Unaligned: true}},
			// A timeout below 1 ms starts aligned and switches at once.
			{"timeout=0", weir.CheckpointConfig{Interval: 10 * time.Millisecond, Unaligned: true, AlignedTimeout: time.Nanosecond}},
			{"timeout=3ms", weir.CheckpointConfig{Interval: 10 * time.Millisecond, Unaligned: true, AlignedTimeout: 3 * time.Millisecond}},
		} {
			seed := uint64(time.Now().UnixNano())
			r := rand.New(rand.NewPCG(seed, 11))
			var failAt []int64
			at := int64(0)
			for range 3 {
				at += 2000 + r.Int64N(n/4)
				failAt = append(failAt, at)
			}
			t.Run(fmt.Sprintf("%s/%s/seed=%d", tr.name, mode.name, seed), func(t *testing.T) {
				mode.cfg.TolerableFailures = 10
				st := newWatchedStorage()
				mode.cfg.Storage = st
				out, violations, res := orderedJob(t, tr.opt, mode.cfg, n, 2, failAt)
				requireExactlyOnce(t, out, n)
				require.Zero(t, violations, "records of a channel out of order")
				require.GreaterOrEqual(t, res.Restarts, 1)
				require.Zero(t, res.LeakedSegments)
				require.Positive(t, res.Checkpoints.Completed)
				require.Positive(t, st.channels.Load(), "some checkpoint held in-flight data")
			})
		}
	}
}

// Unaligned checkpoints that expire while their channel state is being
// recorded, and checkpoints subsumed by newer ones (two at a time), lose,
// duplicate and leak nothing either.
func TestUnalignedAbortedAndSubsumed(t *testing.T) {
	const n = 30000
	forEachTransport(t, func(t *testing.T, tr weir.Option) {
		cfg := weir.CheckpointConfig{Interval: 10 * time.Millisecond, Unaligned: true, AlignedTimeout: 2 * time.Millisecond,
			Timeout: 20 * time.Millisecond, MaxConcurrent: 2, TolerableFailures: math.MaxInt32}
		out, violations, res := orderedJob(t, tr, cfg, n, 2, []int64{n / 2})
		requireExactlyOnce(t, out, n)
		require.Zero(t, violations)
		require.Zero(t, res.LeakedSegments)
	})
}

// With buffer debloating on, the producers' buffers shrink under the slow
// stage while unaligned checkpoints and kills go on: still exactly once and
// in order.
func TestDebloatingExactlyOnce(t *testing.T) {
	const n = 40000
	forEachTransport(t, func(t *testing.T, tr weir.Option) {
		cfg := weir.CheckpointConfig{Interval: 10 * time.Millisecond, Unaligned: true, TolerableFailures: 10}
		out, violations, res := orderedJob(t, tr, cfg, n, 2, []int64{n / 3, 2 * n / 3},
			weir.WithBufferDebloating(weir.DebloatConfig{Target: 20 * time.Millisecond, Period: 5 * time.Millisecond}))
		requireExactlyOnce(t, out, n)
		require.Zero(t, violations)
		require.Zero(t, res.LeakedSegments)
	})
}

// Without chaining every exchange is a task boundary, forward ones
// included: their barriers travel in band unless unaligned checkpoints are
// forced; either way the kills stay exactly once and in order.
func TestUnalignedForwardExchanges(t *testing.T) {
	const n = 30000
	for _, force := range []bool{false, true} {
		t.Run(fmt.Sprintf("force=%v", force), func(t *testing.T) {
			cfg := weir.CheckpointConfig{Interval: 10 * time.Millisecond, Unaligned: true, ForceUnaligned: force, TolerableFailures: 10}
			out, violations, res := orderedJob(t, transports[0].opt, cfg, n, 2, []int64{n / 2}, weir.WithChaining(false))
			requireExactlyOnce(t, out, n)
			require.Zero(t, violations)
			require.Zero(t, res.LeakedSegments)
		})
	}
}

// sumJobAt is a keyed running sum over a held source at parallelism 2,
// its keyed stage slow and at parallelism p: the exchange between them is
// full while the source holds its end.
func sumJobAt(env *weir.Environment, n int64, p int, release func() error) (*weir.Collected[[2]int64], *atomic.Int64) {
	var read atomic.Int64
	src := weir.FromPollingReader(env, "held source", func(sub, par int) (weir.PollingReader[[2]int64], error) {
		return &heldReader{i: int64(sub), step: int64(par), n: n, release: release}, nil
	}).WithCodec(pairCodec).Parallelism(2).UID("source")
	counted := weir.Map(src, func(v [2]int64) [2]int64 { read.Add(1); return v }).WithCodec(pairCodec).UID("count")
	sums := weir.Process(weir.KeyBy(counted, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
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
				if err := sum.Update(s + v[1]); err != nil {
					return err
				}
				out.Emit([2]int64{k, s + v[1]})
				return nil
			})
		}).Name("sum").WithCodec(pairCodec).Parallelism(p).UID("sum")
	got, sink := weir.Collect(sums)
	sink.Parallelism(p).UID("collect") // chained to the sum at any parallelism
	return got, &read
}

// An unaligned checkpoint holds the data in flight between tasks; it
// restores at its own parallelism, exactly, and is refused at another one
// with an error that points at an aligned savepoint. Savepoints of the
// same job are aligned and rescale.
func TestUnalignedCheckpointRestoresOnlyAtItsParallelism(t *testing.T) {
	const n = 100000
	storagetest.Run(t, func(t *testing.T, s *storagetest.Storage) {
		dir, spDir := s.Root(), s.Savepoints()
		ctx := testCtx(t)
		ckpt := weir.CheckpointConfig{Interval: time.Hour, Unaligned: true, Dir: dir, RetainOnCancel: true}
		var hold atomic.Bool
		hold.Store(true)
		release := func() error {
			if hold.Load() {
				return nil
			}
			return io.EOF
		}
		env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond), weir.WithCheckpointing(ckpt),
			weir.WithJobID("unaligned"))
		_, read := sumJobAt(env, n, 2, release)
		job, err := env.Start(ctx)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return read.Load() > 5000 }, time.Minute, time.Millisecond)

		fs := s.Open(dir, "unaligned")
		var chk string
		require.Eventually(t, func() bool {
			id, err := job.TriggerCheckpoint(ctx)
			require.NoError(t, err)
			m, err := fs.ReadMetadata(id)
			require.NoError(t, err)
			for _, ts := range m.Tasks {
				if ts.Channels != nil {
					chk = s.Checkpoint(dir, "unaligned", id)
					return true
				}
			}
			return false // nothing was in flight: try again
		}, time.Minute, 5*time.Millisecond)
		sp, err := job.TriggerSavepoint(ctx, spDir)
		require.NoError(t, err)
		m, err := s.OpenSavepoint(sp)
		require.NoError(t, err)
		for k, ts := range m.Tasks {
			require.Nil(t, ts.Channels, "savepoints are aligned: %v", k)
		}
		job.Cancel()
		_, err = job.Wait()
		require.ErrorIs(t, err, context.Canceled)

		run := func(p int, from string) (*weir.Collected[[2]int64], error) {
			env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
				weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour, Unaligned: true}), weir.WithRestoreFrom(from))
			got, _ := sumJobAt(env, n, p, func() error { return io.EOF })
			res, err := env.Execute(ctx)
			if err == nil {
				require.Zero(t, res.LeakedSegments)
			}
			return got, err
		}
		_, err = run(3, chk)
		require.ErrorContains(t, err, "aligned savepoint")
		for _, tc := range []struct {
			p    int
			from string
		}{{2, chk}, {3, sp}} {
			got, err := run(tc.p, tc.from)
			require.NoError(t, err, "p=%d from %s", tc.p, tc.from)
			require.Equal(t, wantSums(n), finalSums(got.Values()), "p=%d from %s", tc.p, tc.from)
			require.Len(t, got.Values(), n, "p=%d from %s: one output per input", tc.p, tc.from)
		}
	})
}

// coJob connects held source a (parallelism 1) and held source b
// (parallelism 3) into a slow CoMap at parallelism 2 that tags each value
// with its source (1 or 2), into a checkpointed Collect; swapped connects
// them the other way round, with the same result: the CoMap's input 0
// then has 3 channels and its input 1 one, where they had 1 and 3.
func coJob(env *weir.Environment, n int64, swapped bool, release func() error) (*weir.Collected[[2]int64], *atomic.Int64) {
	var read atomic.Int64
	src := func(name string, p int) *weir.Stream[[2]int64] {
		return weir.FromPollingReader(env, name, func(sub, par int) (weir.PollingReader[[2]int64], error) {
			return &heldReader{i: int64(sub), step: int64(par), n: n, release: release}, nil
		}).WithCodec(pairCodec).Parallelism(p).UID(name)
	}
	a, b := src("a", 1), src("b", 3)
	tag := func(t int64) func([2]int64) [2]int64 {
		return func(v [2]int64) [2]int64 {
			if read.Add(1)%64 == 0 {
				time.Sleep(320 * time.Microsecond) // slow: the exchanges into the CoMap stay full
			}
			return [2]int64{t, v[1]}
		}
	}
	var out *weir.Stream[[2]int64]
	if swapped {
		out = weir.CoMap(weir.Connect(b, a), tag(2), tag(1))
	} else {
		out = weir.CoMap(weir.Connect(a, b), tag(1), tag(2))
	}
	got, sink := weir.Collect(out.WithCodec(pairCodec).Parallelism(2).UID("co"))
	sink.Parallelism(2).UID("collect")
	return got, &read
}

// The channel state of a two-input task is recorded per input: an
// unaligned checkpoint taken while both inputs have data in flight
// restores exactly into the same job, and is refused by the job whose
// inputs are swapped (the same number of channels, split otherwise),
// where each channel's data would reach the other input.
func TestUnalignedChannelStateKeepsItsInputs(t *testing.T) {
	const n = 30000
	storagetest.Run(t, func(t *testing.T, s *storagetest.Storage) {
		dir := s.Root()
		ctx := testCtx(t)
		var hold atomic.Bool
		hold.Store(true)
		release := func() error {
			if hold.Load() {
				return nil
			}
			return io.EOF
		}
		env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
			weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour, Unaligned: true, Dir: dir, RetainOnCancel: true}),
			weir.WithJobID("co"))
		_, read := coJob(env, n, false, release)
		job, err := env.Start(ctx)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return read.Load() > 2000 }, time.Minute, time.Millisecond)

		fs := s.Open(dir, "co")
		var chk string
		require.Eventually(t, func() bool {
			id, err := job.TriggerCheckpoint(ctx)
			require.NoError(t, err)
			m, err := fs.ReadMetadata(id)
			require.NoError(t, err)
			for _, ts := range m.Tasks {
				if c := ts.Channels; c != nil && len(c.Inputs) == 2 {
					require.Equal(t, []int{1, 3}, c.Inputs)
					chk = s.Checkpoint(dir, "co", id)
					return true
				}
			}
			return false // nothing was in flight into the CoMap: try again
		}, time.Minute, 5*time.Millisecond)
		job.Cancel()
		_, err = job.Wait()
		require.ErrorIs(t, err, context.Canceled)

		run := func(swapped bool) (*weir.Collected[[2]int64], error) {
			env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
				weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour, Unaligned: true}), weir.WithRestoreFrom(chk))
			got, _ := coJob(env, n, swapped, func() error { return io.EOF })
			_, err := env.Execute(ctx)
			return got, err
		}
		_, err = run(true)
		require.ErrorIs(t, err, task.ErrRescaleChannelState)
		require.ErrorContains(t, err, "input channels [1 3] by input, now [3 1]")

		got, err := run(false)
		require.NoError(t, err)
		vs := got.Values()
		slices.SortFunc(vs, func(x, y [2]int64) int { return cmp.Or(cmp.Compare(x[0], y[0]), cmp.Compare(x[1], y[1])) })
		want := make([][2]int64, 0, 2*n)
		for src := int64(1); src <= 2; src++ {
			for i := range int64(n) {
				want = append(want, [2]int64{src, i})
			}
		}
		require.Equal(t, want, vs)
	})
}
