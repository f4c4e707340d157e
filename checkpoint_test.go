package weir_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/storagetest"
	"github.com/weirstream/weir/weirtest"
)

// keyedSumJob: source -> map (fails on chosen records) -> keyBy -> running
// sum -> collect. It returns the final sum per key and the number of
// outputs collected. Failure k fires at the first record at or after
// failAt[k] once a checkpoint completed since failure k-1, so that every
// failure restores from a checkpoint whatever the machine's speed; the
// source holds its end back (waiting without blocking its task) until
// every failure fired, and fires those still due itself.
func keyedSumJob(t *testing.T, tr weir.Option, mode weir.CheckpointConfig, n int64, p int, failAt []int64, dir string, opts ...weir.Option) (map[int64]int64, int, *weir.Result) {
	t.Helper()
	env := weir.NewEnvironment(append([]weir.Option{tr, weir.WithParallelism(p), weir.WithCheckpointing(mode), weir.WithBufferTimeout(time.Millisecond)}, opts...)...)
	var (
		processed   atomic.Int64
		next        atomic.Int64
		job         atomic.Pointer[weir.Job]
		completedAt atomic.Int64 // checkpoints completed at the last failure
	)
	// fire reports whether failure k is due now and claims it.
	fire := func(c int64) (int64, bool) {
		k := next.Load()
		if int(k) >= len(failAt) || c < failAt[k] {
			return k, false
		}
		j := job.Load()
		if j == nil {
			return k, false
		}
		done := int64(j.CheckpointStats().Completed)
		if done > completedAt.Load() && next.CompareAndSwap(k, k+1) {
			completedAt.Store(done)
			return k, true
		}
		return k, false
	}
	release := func() error {
		if int(next.Load()) >= len(failAt) {
			return io.EOF
		}
		if k, ok := fire(math.MaxInt64); ok {
			return fmt.Errorf("injected failure %d at the end of the input", k)
		}
		return nil
	}
	src := weir.FromPollingReader(env, "held source", func(sub, par int) (weir.PollingReader[[2]int64], error) {
		return &heldReader{i: int64(sub), step: int64(par), n: n, release: release}, nil
	}).WithCodec(pairCodec)
	m := weir.Map(src, func(v [2]int64) [2]int64 {
		c := processed.Add(1)
		if k, ok := fire(c); ok {
			panic(fmt.Sprintf("injected failure %d at record %d", k, c))
		}
		return v
	}).Name("faulty").WithCodec(pairCodec)
	sums := weir.Reduce(weir.KeyBy(m, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
		func(a, b [2]int64) [2]int64 { return [2]int64{a[0], a[1] + b[1]} }).Name("sum")
	got, _ := weir.Collect(sums)
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	job.Store(j)
	res, err := j.Wait()
	require.NoError(t, err)
	final := map[int64]int64{}
	for _, v := range got.Values() {
		final[v[0]] = max(final[v[0]], v[1])
	}
	return final, len(got.Values()), res
}

func TestExactlyOnceRecoveryFromInjectedFailures(t *testing.T) {
	const n = 200000
	want := map[int64]int64{}
	for i := int64(0); i < n; i++ {
		want[i%37] += i
	}
	for _, tr := range transports {
		for _, p := range []int{1, 2} {
			seed := uint64(time.Now().UnixNano())
			r := rand.New(rand.NewPCG(seed, uint64(p)))
			var failAt []int64
			at := int64(0)
			for k := 0; k < 3; k++ {
				at += 20000 + r.Int64N(40000)
				failAt = append(failAt, at)
			}
			t.Run(fmt.Sprintf("%s/p=%d/seed=%d", tr.name, p, seed), func(t *testing.T) {
				final, count, res := keyedSumJob(t, tr.opt, weir.CheckpointConfig{Interval: 10 * time.Millisecond}, n, p, failAt, "")
				require.Equal(t, want, final)
				// Exactly once: one output per input, none twice.
				require.Equal(t, n, count)
				require.GreaterOrEqual(t, res.Restarts, 1)
				require.LessOrEqual(t, res.Restarts, len(failAt))
				require.Zero(t, res.LeakedSegments)
				require.NotNil(t, res.Checkpoints)
				require.Positive(t, res.Checkpoints.Completed)
			})
		}
	}
}

func TestAtLeastOnceLosesNothing(t *testing.T) {
	const n = 100000
	want := map[int64]int64{}
	for i := int64(0); i < n; i++ {
		want[i%37] += i
	}
	final, count, res := keyedSumJob(t, weir.WithTCPExchanges(false), weir.CheckpointConfig{Interval: 10 * time.Millisecond, Mode: weir.AtLeastOnce}, n, 2, []int64{30000}, "")
	require.GreaterOrEqual(t, count, n)
	for k, w := range want {
		require.GreaterOrEqual(t, final[k], w, "key %d", k)
	}
	require.Equal(t, 1, res.Restarts)
}

// Checkpoints in a directory or a bucket: a failure restores from the
// latest and the sums are exact.
func TestCheckpointsSurviveRestart(t *testing.T) {
	const n = 100000
	want := map[int64]int64{}
	for i := int64(0); i < n; i++ {
		want[i%37] += i
	}
	storagetest.Run(t, func(t *testing.T, s *storagetest.Storage) {
		final, count, res := keyedSumJob(t, weir.WithTCPExchanges(false), weir.CheckpointConfig{Interval: 10 * time.Millisecond, Dir: s.Root()}, n, 2, []int64{50000}, "")
		require.Equal(t, want, final)
		require.Equal(t, n, count)
		require.Equal(t, 1, res.Restarts)
	})
}

func TestCheckpointConfigValidation(t *testing.T) {
	for name, c := range map[string]weir.CheckpointConfig{
		"negative interval":        {Interval: -time.Second},
		"zero interval":            {},
		"timeout < pause":          {Interval: time.Second, MinPause: time.Minute, Timeout: time.Second},
		"retained < 0":             {Interval: time.Second, Retained: -1},
		"force, aligned":           {Interval: time.Second, ForceUnaligned: true},
		"timeout, aligned":         {Interval: time.Second, AlignedTimeout: time.Second},
		"unaligned, at-least-once": {Interval: time.Second, Unaligned: true, Mode: weir.AtLeastOnce},
		"negative timeout":         {Interval: time.Second, Unaligned: true, AlignedTimeout: -1},
	} {
		t.Run(name, func(t *testing.T) {
			env := weir.NewEnvironment(weir.WithCheckpointing(c))
			weir.Discard(weir.FromGenerator(env, 1, func(i int64) int64 { return i }))
			_, err := env.Execute(testCtx(t))
			require.Error(t, err)
		})
	}
}

// Fifty task kills across ten seeds of a 3-stage keyed job at parallelism
// 2, each seed killing subtasks at five records weirtest draws: every
// key's running sums are the no-failure run's, each once and in order.
// Over TCP exchanges, twenty kills across four seeds: every kill tears
// down the attempt's connections and partitions, and the next attempt
// reads fresh ones.
func TestFiftyKillsExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	for _, tc := range []struct {
		tcp   bool
		seeds int
	}{{false, 10}, {true, 4}} {
		t.Run(fmt.Sprintf("tcp=%v", tc.tcp), func(t *testing.T) {
			rep := weirtest.Run(t, weirtest.Config{Seeds: tc.seeds, TCP: tc.tcp, Kinds: weirtest.Of(weirtest.TaskFailure),
				MinFaults: 5, MaxFaults: 5, CheckpointInterval: 10 * time.Millisecond}, func(r *weirtest.R) {
				env := r.Env(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond))
				// Key i%36 has the parity of i: each key's values come from
				// one source subtask, so its running sums are deterministic.
				src := weir.FromGenerator(env, 60000, func(i int64) [2]int64 { return [2]int64{i % 36, i} }).WithCodec(pairCodec)
				m := weir.Map(src, func(v [2]int64) [2]int64 { return v }).Name("map").WithCodec(pairCodec)
				sums := weir.Reduce(weir.KeyBy(m, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
					func(a, b [2]int64) [2]int64 { return [2]int64{a[0], a[1] + b[1]} }).Name("sum")
				weirtest.Collect(r, sums, func(v [2]int64) string { return fmt.Sprint(v[0]) })
			})
			kills := 0
			for _, s := range rep.Seeds {
				kills += s.Fired
				require.Positive(t, s.Restarts, "seed %d", s.Seed)
			}
			require.Equal(t, 5*tc.seeds, kills)
		})
	}
}

// heldReader reads (i % 37, i) for i = sub, sub+par, … below n, then
// waits (polling every millisecond, without blocking its task) until
// release returns io.EOF; another error from release fails the task. Its
// position is checkpointed.
type heldReader struct {
	i, step, n int64
	release    func() error
	timer      *time.Timer
	ready      chan struct{}
}

func (r *heldReader) Poll() ([2]int64, weir.ReadStatus, error) {
	if r.i < r.n {
		v := [2]int64{r.i % 37, r.i}
		r.i += r.step
		return v, weir.Read, nil
	}
	switch err := r.release(); {
	case err == io.EOF:
		return [2]int64{}, weir.EndOfInput, nil
	case err != nil:
		return [2]int64{}, weir.EndOfInput, err
	}
	return [2]int64{}, weir.NothingAvailable, nil
}

func (r *heldReader) Available() <-chan struct{} {
	if r.ready == nil {
		r.ready = make(chan struct{}, 1)
		r.timer = time.AfterFunc(time.Millisecond, r.signal)
	} else {
		r.timer.Reset(time.Millisecond)
	}
	return r.ready
}

func (r *heldReader) signal() {
	select {
	case r.ready <- struct{}{}:
	default:
	}
}

func (r *heldReader) Close() error {
	if r.timer != nil {
		r.timer.Stop()
	}
	return nil
}

func (r *heldReader) Position() ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, uint64(r.i)), nil
}

func (r *heldReader) Seek(pos []byte) error {
	if len(pos) != 8 {
		return fmt.Errorf("position of %d bytes", len(pos))
	}
	r.i = int64(binary.BigEndian.Uint64(pos))
	return nil
}
