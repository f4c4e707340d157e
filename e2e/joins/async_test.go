package joins_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/task"
	"github.com/weirstream/weir/weirtest"
)

// lookup is the async function of the tests: a deterministic result
// after a random delay of up to max.
func lookup(maxDelay time.Duration) func(context.Context, int64) (int64, error) {
	return func(ctx context.Context, v int64) (int64, error) {
		if maxDelay > 0 {
			d := time.Duration(rand.Int64N(int64(maxDelay)))
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		return 3*v + 1, nil
	}
}

func wantLookups(n int64) []int64 {
	want := make([]int64, n)
	for i := range want {
		want[i] = 3*int64(i) + 1
	}
	return want
}

// AsyncMap emits one result per value; ordered, in input order; through a
// chain after the source and after an exchange.
func TestAsyncMapOrders(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		for _, chained := range []bool{true, false} {
			t.Run(fmt.Sprintf("ordered=%v/chained=%v", ordered, chained), func(t *testing.T) {
				t.Parallel()
				const n = 3000
				env := weir.NewEnvironment(weir.WithParallelism(1), weir.WithBufferTimeout(time.Millisecond))
				src := weir.FromGenerator(env, n, func(i int64) int64 { return i })
				if !chained {
					src = src.Rebalance()
				}
				got, _ := weir.Collect(weir.AsyncMap(src, lookup(300*time.Microsecond), weir.AsyncOptions{Capacity: 10, Ordered: ordered}))
				_, err := env.Execute(testCtx(t))
				require.NoError(t, err)
				vs := got.Values()
				if !ordered {
					slices.Sort(vs)
				}
				require.Equal(t, wantLookups(n), vs)
			})
		}
	}
}

// With task kills (in the function itself, on its goroutine, and
// upstream), in-process and over TCP, aligned and unaligned, ordered and
// not: every result exactly once — the values in flight at a checkpoint
// are part of it and are looked up again after the restore. With one
// subtask and ordered results the output keeps the input order across
// the restarts. The failures fire at call counts, each once a checkpoint
// completed in the attempt after the previous one's, and the source holds
// the end of its input until all of them fired: every run restarts
// exactly three times from a checkpoint, however fast the machine.
func TestAsyncExactlyOnceUnderKills(t *testing.T) {
	for _, tr := range transports {
		for _, unaligned := range []bool{false, true} {
			for _, ordered := range []bool{true, false} {
				seed := uint64(time.Now().UnixNano())
				t.Run(fmt.Sprintf("%s/unaligned=%v/ordered=%v/seed=%d", tr.name, unaligned, ordered, seed), func(t *testing.T) {
					t.Parallel()
					const n = 6000
					p := 2
					if ordered {
						p = 1
					}
					k := newKiller(seed, 3, n/5)
					env := weir.NewEnvironment(tr.opt, weir.WithParallelism(p), weir.WithBufferTimeout(time.Millisecond),
						weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, Unaligned: unaligned, TolerableFailures: 10}))
					evs := make([]event, n)
					for i := range evs {
						evs[i].V = int64(i)
					}
					src := weir.FromPollingReader(env, "values", func(sub, par int) (weir.PollingReader[event], error) {
						k.attemptStarted()
						return newHeldReader(evs, sub, par, 0, nil, k.release), nil
					}).WithCodec(eventCodec)
					up := weir.Map(src, func(e event) int64 {
						if e.V%2 == 0 {
							k.maybe()
						}
						return e.V
					}).Rebalance()
					fn := lookup(500 * time.Microsecond)
					out := weir.AsyncMap(up, func(ctx context.Context, v int64) (int64, error) {
						if v%2 == 1 {
							k.maybe() // a panic in the callback fails the task
						}
						return fn(ctx, v)
					}, weir.AsyncOptions{Capacity: 20, Timeout: time.Minute, Ordered: ordered})
					got, _ := weir.Collect(out)
					res := k.run(t, env)
					vs := got.Values()
					if !ordered {
						slices.Sort(vs)
					}
					require.Equal(t, wantLookups(n), vs)
					require.Equal(t, len(k.at), k.fired())
					require.Equal(t, len(k.at), res.Restarts)
					require.Zero(t, res.LeakedSegments)
				})
			}
		}
	}
}

// A full queue stops the task's input without blocking its mailbox:
// checkpoints complete while every call hangs, and no more calls than the
// capacity ever run at once; the source task with AsyncMap chained, and a
// task behind an exchange under unaligned checkpoints.
func TestAsyncBackPressureKeepsCheckpointing(t *testing.T) {
	for _, chained := range []bool{true, false} {
		t.Run(fmt.Sprintf("chained=%v", chained), func(t *testing.T) {
			t.Parallel()
			// The input is more than the network buffers hold, so that
			// the source does not finish while the calls hang (a task
			// whose inputs all finished takes its checkpoints at the end
			// of its input).
			const capacity, n = 5, 3000
			pad := strings.Repeat("x", 1000)
			release := make(chan struct{})
			var running, most atomic.Int64
			env := weir.NewEnvironment(weir.WithParallelism(1), weir.WithBufferTimeout(time.Millisecond),
				weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, Unaligned: !chained}))
			src := weir.FromGenerator(env, n, func(i int64) string { return fmt.Sprintf("%06d%s", i, pad) })
			if !chained {
				src = src.Rebalance()
			}
			out := weir.AsyncMap(src, func(ctx context.Context, v string) (string, error) {
				r := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); r > m && !most.CompareAndSwap(m, r); m = most.Load() {
				}
				select {
				case <-release:
				case <-ctx.Done():
					return "", ctx.Err()
				}
				return v[:6], nil
			}, weir.AsyncOptions{Capacity: capacity, Ordered: true})
			got, _ := weir.Collect(out)
			job, err := env.Start(testCtx(t))
			require.NoError(t, err)
			for running.Load() < capacity {
				time.Sleep(time.Millisecond)
			}
			before := job.CheckpointStats().Completed
			for job.CheckpointStats().Completed < before+3 {
				time.Sleep(time.Millisecond)
			}
			require.EqualValues(t, capacity, running.Load())
			close(release)
			_, err = job.Wait()
			require.NoError(t, err)
			want := make([]string, n)
			for i := range want {
				want[i] = fmt.Sprintf("%06d", i)
			}
			require.Equal(t, want, got.Values())
			require.EqualValues(t, capacity, most.Load())
		})
	}
}

// A savepoint taken while every call hangs holds the values in flight; a
// job restored from it at another parallelism looks them up again: the
// output is exact.
func TestAsyncSavepointRescale(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			t.Parallel()
			const n, capacity = 2000, 8
			var inFlight atomic.Int64
			hang := func(ctx context.Context, v int64) (int64, error) {
				inFlight.Add(1)
				<-ctx.Done()
				return 0, ctx.Err()
			}
			build := func(p int, fn func(context.Context, int64) (int64, error), opts ...weir.Option) (*weir.Environment, *weir.Collected[int64]) {
				env := weir.NewEnvironment(append([]weir.Option{weir.WithParallelism(p), weir.WithBufferTimeout(time.Millisecond),
					weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour})}, opts...)...)
				src := weir.FromGenerator(env, n, func(i int64) int64 { return i }).UID("source")
				out := weir.AsyncMap(src, fn, weir.AsyncOptions{Capacity: capacity, Ordered: ordered}).UID("lookup")
				got, sink := weir.Collect(out)
				sink.UID("collect")
				return env, got
			}
			env, _ := build(2, hang)
			job, err := env.Start(testCtx(t))
			require.NoError(t, err)
			for inFlight.Load() < 2*capacity {
				time.Sleep(time.Millisecond)
			}
			sp, err := job.StopWithSavepoint(testCtx(t), t.TempDir())
			require.NoError(t, err)
			_, err = job.Wait()
			require.NoError(t, err)

			env2, got := build(3, lookup(200*time.Microsecond), weir.WithRestoreFrom(sp))
			_, err = env2.Execute(testCtx(t))
			require.NoError(t, err)
			vs := got.Values()
			slices.Sort(vs)
			require.Equal(t, wantLookups(n), vs)
		})
	}
}

// A call still running at its timeout fails the job, unless OnTimeout
// gives a fallback; the late result is ignored, and the function's context
// is done at the deadline. The jobs run in a synctest bubble: time moves
// only when every goroutine of the job waits, so the calls that return at
// once are never late and the one that sleeps past its deadline always
// is, however loaded the machine.
func TestAsyncTimeout(t *testing.T) {
	slow := func(ctx context.Context, v int64) (int64, error) {
		if v%10 == 3 {
			<-ctx.Done()
			return 0, ctx.Err() // DeadlineExceeded: the operator times it out
		}
		if v%10 == 7 {
			time.Sleep(60 * time.Millisecond) // ignores its context, returns late
			return -1, nil
		}
		return 3*v + 1, nil
	}
	t.Run("fails", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			env := weir.NewEnvironment(weir.WithParallelism(1))
			src := weir.FromGenerator(env, 100, func(i int64) int64 { return i })
			weir.Discard(weir.AsyncMap(src, slow, weir.AsyncOptions{Capacity: 4, Timeout: 20 * time.Millisecond}))
			start := time.Now()
			_, err := env.Execute(t.Context())
			require.ErrorIs(t, err, weir.ErrAsyncTimeout)
			var te *task.Error
			require.ErrorAs(t, err, &te)
			require.Equal(t, "async map", te.Operator)
			// Value 3's call timed out at its deadline, not before.
			require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
		})
	})
	t.Run("fallback", func(t *testing.T) {
		for _, ordered := range []bool{true, false} {
			synctest.Test(t, func(t *testing.T) {
				env := weir.NewEnvironment(weir.WithParallelism(1))
				src := weir.FromGenerator(env, 100, func(i int64) int64 { return i })
				out := weir.AsyncMap(src, slow, weir.AsyncOptions{Capacity: 4, Timeout: 20 * time.Millisecond, Ordered: ordered},
					weir.OnTimeout(func(v int64) (int64, error) { return -v, nil }))
				got, _ := weir.Collect(out)
				_, err := env.Execute(t.Context())
				require.NoError(t, err)
				var want []int64
				for i := int64(0); i < 100; i++ {
					if i%10 == 3 || i%10 == 7 {
						want = append(want, -i)
					} else {
						want = append(want, 3*i+1)
					}
				}
				vs := got.Values()
				if !ordered {
					slices.Sort(vs)
					slices.Sort(want)
				}
				require.Equal(t, want, vs)
			})
		}
	})
	t.Run("fallback fails", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			boom := errors.New("no fallback")
			env := weir.NewEnvironment(weir.WithParallelism(1))
			src := weir.FromGenerator(env, 100, func(i int64) int64 { return i })
			weir.Discard(weir.AsyncMap(src, slow, weir.AsyncOptions{Capacity: 4, Timeout: 20 * time.Millisecond},
				weir.OnTimeout(func(v int64) (int64, error) { return 0, boom })))
			_, err := env.Execute(t.Context())
			require.ErrorIs(t, err, boom)
		})
	})
}

// A function that returns an error or panics fails its task, naming the
// operator; so does a panicking fallback.
func TestAsyncFailures(t *testing.T) {
	boom := errors.New("lookup failed")
	for _, tc := range []struct {
		name  string
		fn    func(context.Context, int64) (int64, error)
		check func(t *testing.T, err error)
	}{
		{"error", func(_ context.Context, v int64) (int64, error) {
			if v == 50 {
				return 0, boom
			}
			return v, nil
		}, func(t *testing.T, err error) { require.ErrorIs(t, err, boom) }},
		{"panic", func(_ context.Context, v int64) (int64, error) {
			if v == 50 {
				panic("lookup panicked")
			}
			return v, nil
		}, func(t *testing.T, err error) {
			var pe *task.PanicError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "lookup panicked", pe.Value)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := weir.NewEnvironment(weir.WithParallelism(2))
			src := weir.FromGenerator(env, 200, func(i int64) int64 { return i })
			weir.Discard(weir.AsyncMap(src, tc.fn, weir.AsyncOptions{Capacity: 8}).Name("lookup"))
			_, err := env.Execute(testCtx(t))
			require.Error(t, err)
			tc.check(t, err)
			var te *task.Error
			require.ErrorAs(t, err, &te)
			require.Equal(t, "lookup", te.Operator)
		})
	}
	t.Run("panicking fallback", func(t *testing.T) {
		env := weir.NewEnvironment(weir.WithParallelism(1))
		src := weir.FromGenerator(env, 10, func(i int64) int64 { return i })
		weir.Discard(weir.AsyncMap(src, func(ctx context.Context, v int64) (int64, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}, weir.AsyncOptions{Capacity: 2, Timeout: 5 * time.Millisecond},
			weir.OnTimeout(func(int64) (int64, error) { panic("fallback panicked") })))
		_, err := env.Execute(testCtx(t))
		var pe *task.PanicError
		require.ErrorAs(t, err, &pe)
	})
}

// Canceling the job cancels the calls' contexts: a job whose calls wait
// for their context ends promptly.
func TestAsyncCancel(t *testing.T) {
	var started, canceled atomic.Int64
	ctx, cancel := context.WithCancel(testCtx(t))
	env := weir.NewEnvironment(weir.WithParallelism(2))
	src := weir.FromGenerator(env, 1000, func(i int64) int64 { return i })
	weir.Discard(weir.AsyncMap(src, func(ctx context.Context, v int64) (int64, error) {
		started.Add(1)
		<-ctx.Done()
		canceled.Add(1)
		return 0, ctx.Err()
	}, weir.AsyncOptions{Capacity: 3}))
	var wg sync.WaitGroup
	var err error
	wg.Go(func() { _, err = env.Execute(ctx) })
	for started.Load() < 6 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, started.Load(), canceled.Load())
}

// Bad options are errors from Execute.
func TestAsyncOptionErrors(t *testing.T) {
	for _, opts := range []weir.AsyncOptions{{Capacity: -1}, {Timeout: -time.Second}} {
		env := weir.NewEnvironment()
		src := weir.FromGenerator(env, 10, func(i int64) int64 { return i })
		weir.Discard(weir.AsyncMap(src, lookup(0), opts))
		_, err := env.Execute(testCtx(t))
		require.ErrorContains(t, err, "async map")
	}
	env := weir.NewEnvironment()
	src := weir.FromGenerator(env, 10, func(i int64) int64 { return i })
	weir.Discard(weir.AsyncMap[int64, int64](src, nil, weir.AsyncOptions{}))
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, "no function")
}

// weirtest's fault plans (task, snapshot and storage failures, slow
// consumers, connection resets) over an AsyncMap job: the committed output
// is the fault-free run's, each value's result once, in input order per
// source subtask.
func TestAsyncWeirtest(t *testing.T) {
	t.Parallel()
	kinds := weirtest.Of(weirtest.TaskFailure, weirtest.SnapshotFailure, weirtest.SlowConsumer, weirtest.ConnReset, weirtest.ReadError)
	weirtest.Run(t, weirtest.Config{Seeds: 4, TCP: true, Kinds: kinds}, func(r *weirtest.R) {
		env := r.Env(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond))
		src := weir.FromGenerator(env, 5000, func(i int64) int64 { return i })
		out := weir.AsyncMap(src, lookup(200*time.Microsecond), weir.AsyncOptions{Capacity: 16, Timeout: 10 * time.Second, Ordered: true})
		// FromGenerator's subtask s reads s, s+2, …: the results of a
		// subtask keep its order.
		weirtest.Collect(r, out, func(v int64) string { return fmt.Sprint((v - 1) / 3 % 2) })
	})
}
