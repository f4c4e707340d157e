package multiinput_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/weirtest"
)

// killer makes a hook panic: the k-th failure once failAt[k] values went
// through the hook and a checkpoint completed since the previous failure
// (so that the job restores from a checkpoint, not from the start).
type killer struct {
	failAt      []int64
	seen, next  atomic.Int64
	completedAt atomic.Int64
	job         atomic.Pointer[weir.Job]
}

func newKiller(seed uint64, n int64, kills int) *killer {
	r := rand.New(rand.NewPCG(seed, 24))
	k := &killer{}
	at := int64(0)
	for range kills {
		at += n/8 + r.Int64N(n/4)
		k.failAt = append(k.failAt, at)
	}
	return k
}

func (k *killer) hook() {
	c := k.seen.Add(1)
	i := k.next.Load()
	if int(i) >= len(k.failAt) || c < k.failAt[i] {
		return
	}
	j := k.job.Load()
	if j == nil {
		return
	}
	done := int64(j.CheckpointStats().Completed)
	if done > k.completedAt.Load() && k.next.CompareAndSwap(i, i+1) {
		k.completedAt.Store(done)
		panic(fmt.Sprintf("injected failure %d at value %d", i, c))
	}
}

// requireLines requires got to hold want's lines, as a multiset; it
// reports at most ten missing and ten extra lines.
func requireLines(t *testing.T, want, got []string, what string) {
	t.Helper()
	count := map[string]int{}
	for _, l := range want {
		count[l]++
	}
	for _, l := range got {
		count[l]--
	}
	var missing, extra []string
	for l, n := range count {
		for ; n > 0 && len(missing) < 10; n-- {
			missing = append(missing, l)
		}
		for ; n < 0 && len(extra) < 10; n++ {
			extra = append(extra, l)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	if len(missing)+len(extra) > 0 {
		t.Fatalf("%s: %d lines, want %d; missing %q, extra %q", what, len(got), len(want), missing, extra)
	}
}

// runWithKills runs job with checkpoints every 10 ms and random task
// failures in its user functions, and requires its output to be the batch
// answer, exactly.
func runWithKills(t *testing.T, job jobSpec, opts ...weir.Option) *weir.Result {
	t.Helper()
	return runKilled(t, job, requireLines, opts...)
}

// runKilled is runWithKills with check comparing the output with the
// batch answer.
func runKilled(t *testing.T, job jobSpec, check func(t *testing.T, want, got []string, what string), opts ...weir.Option) *weir.Result {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	k := newKiller(seed, 6000, 2)
	restart, err := coordinator.NewFixedDelay(coordinator.FixedDelayConfig{Attempts: 10})
	require.NoError(t, err)
	env := weir.NewEnvironment(append([]weir.Option{weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
		weir.WithAutoWatermarkInterval(5 * time.Millisecond), weir.WithRestartStrategy(restart)}, opts...)...)
	output := collect(job, env, k.hook, 1)
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	k.job.Store(j)
	res, err := j.Wait()
	require.NoError(t, err, "seed %d", seed)
	check(t, job.want(), output(), fmt.Sprintf("seed %d", seed))
	require.GreaterOrEqual(t, res.Restarts, 1, "seed %d: a failure fired", seed)
	require.Zero(t, res.LeakedSegments)
	return res
}

// Each job, in-process and over TCP, with aligned and with unaligned
// checkpoints, under task failures in its user functions (in either input
// and in OnTimer): its output is the batch answer, exactly once.
func TestJobsExactlyOnceUnderKills(t *testing.T) {
	for _, job := range jobs {
		for _, tr := range transports {
			for _, unaligned := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/unaligned=%v", job.name, tr.name, unaligned), func(t *testing.T) {
					ckpt := weir.CheckpointConfig{Interval: 10 * time.Millisecond, Unaligned: unaligned, TolerableFailures: 100}
					res := runWithKills(t, job, tr.opt, weir.WithCheckpointing(ckpt))
					require.Positive(t, res.Checkpoints.Completed)
				})
			}
		}
	}
}

// At-least-once checkpoints of the broadcast job, in-process and over
// TCP, under task failures: the barrier tracker counts the channels of
// both inputs, the broadcast side's ending early among them. Nothing is
// lost, and nothing but the batch answer's lines comes out (a line may
// come twice: values after the checkpoint are replayed).
func TestAtLeastOnceLosesNothing(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			ckpt := weir.CheckpointConfig{Interval: 10 * time.Millisecond, Mode: weir.AtLeastOnce, TolerableFailures: 100}
			res := runKilled(t, broadcastJob, requireSameLines, tr.opt, weir.WithCheckpointing(ckpt))
			require.Positive(t, res.Checkpoints.Completed)
		})
	}
}

// requireSameLines requires got to hold want's lines and no other, each
// any number of times.
func requireSameLines(t *testing.T, want, got []string, what string) {
	t.Helper()
	w, g := map[string]bool{}, map[string]bool{}
	for _, l := range want {
		w[l] = true
	}
	for _, l := range got {
		g[l] = true
	}
	var missing, extra []string
	for l := range w {
		if !g[l] && len(missing) < 10 {
			missing = append(missing, l)
		}
	}
	for l := range g {
		if !w[l] && len(extra) < 10 {
			extra = append(extra, l)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	if len(missing)+len(extra) > 0 {
		t.Fatalf("%s: %d lines, %d distinct, want %d; missing %q, foreign %q", what, len(got), len(g), len(w), missing, extra)
	}
}

// The broadcast side (20 rules) ends long before the keyed side: the job
// goes on, checkpoints go on completing after it ended (a failure late in
// the keyed input restores one, broadcast state and all), and the answer
// is exact.
func TestBroadcastSideEndsEarly(t *testing.T) {
	k := &killer{failAt: []int64{bcEvents / 2, bcEvents * 3 / 2}}
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond), weir.WithAutoWatermarkInterval(5*time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond}))
	output := collect(broadcastJob, env, k.hook, 1)
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	k.job.Store(j)
	res, err := j.Wait()
	require.NoError(t, err)
	requireLines(t, broadcastJob.want(), output(), "output")
	t.Logf("checkpoints %d, restarts %d", res.Checkpoints.Completed, res.Restarts)
	require.Equal(t, 2, res.Restarts)
	require.GreaterOrEqual(t, res.Checkpoints.Completed, 3)
}

// savepointAt runs job at parallelism p, its sources at a fifth of their
// rate, until at values went through its hook, takes a savepoint, cancels
// it, and returns the savepoint.
func savepointAt(t *testing.T, job jobSpec, p int, at int64, opts ...weir.Option) string {
	t.Helper()
	env := weir.NewEnvironment(append([]weir.Option{weir.WithParallelism(p), weir.WithBufferTimeout(time.Millisecond),
		weir.WithAutoWatermarkInterval(5 * time.Millisecond), weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour})}, opts...)...)
	reached := make(chan struct{})
	var seen atomic.Int64
	collect(job, env, func() {
		if seen.Add(1) == at {
			close(reached)
		}
	}, 0.2)
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	<-reached
	sp, err := j.TriggerSavepoint(testCtx(t), t.TempDir())
	require.NoError(t, err)
	j.Cancel()
	_, err = j.Wait()
	require.ErrorIs(t, err, context.Canceled)
	return sp
}

// Each job, stopped at a savepoint at parallelism 2 and restored at 3 and
// at 1 (keyed state by key group, broadcast state whole to every new
// subtask, timers with their keys), produces the batch answer.
func TestJobsRestoreAtAnotherParallelism(t *testing.T) {
	for _, job := range jobs {
		t.Run(job.name, func(t *testing.T) {
			sp := savepointAt(t, job, 2, 2000)
			for _, p := range []int{3, 1} {
				env := weir.NewEnvironment(weir.WithParallelism(p), weir.WithBufferTimeout(time.Millisecond), weir.WithAutoWatermarkInterval(5*time.Millisecond),
					weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}), weir.WithRestoreFrom(sp))
				output := collect(job, env, func() {}, 1)
				_, err := env.Execute(testCtx(t))
				require.NoError(t, err, "p=%d", p)
				requireLines(t, job.want(), output(), fmt.Sprintf("p=%d", p))
			}
		})
	}
}

// The keyed co-process job keeps its keyed state and timers in pebble:
// exact under task failures.
func TestKeyedCoProcessOnPebble(t *testing.T) {
	sb := weir.WithStateBackend(weir.PebbleBackend(weir.PebbleOptions{Dir: t.TempDir(), MemTableSize: 1 << 20, BlockCacheSize: 1 << 20}))
	runWithKills(t, coTimersJob, sb, weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, TolerableFailures: 100}))
}

// A weirtest run of each job: its committed output under the harness's
// faults (task and snapshot failures, slow consumers, reset connections
// over TCP) is the fault-free run's.
func TestJobsUnderWeirtest(t *testing.T) {
	for _, job := range jobs {
		t.Run(job.name, func(t *testing.T) {
			weirtest.Run(t, weirtest.Config{Seeds: 2, TCP: job.name == "broadcast"}, func(r *weirtest.R) {
				env := r.Env(weir.WithParallelism(2), weir.WithAutoWatermarkInterval(5*time.Millisecond))
				weirtest.Collect(r, job.build(env, func() {}, 1), nil)
			})
		})
	}
}

// One job across processes: a coordinator and two workers (in this
// process, each with its own environment and data plane), a task failing
// once, the output through the exactly-once file sink.
func TestBroadcastJobInCluster(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	var seen atomic.Int64
	hook := func() {
		if seen.Add(1) == bcEvents/2 {
			panic("injected task failure")
		}
	}
	build := func(env *weir.Environment) {
		weir.FileSink(broadcastJob.build(env, hook, 1), out, func(s string) []byte { return []byte(s) })
	}
	res, err := runCluster(t, build)
	require.NoError(t, err)
	require.Equal(t, 1, res.Restarts)
	requireLines(t, broadcastJob.want(), committedLines(t, out), "committed output")
}
