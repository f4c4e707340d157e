package weir_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
)

// A job across processes restored from a savepoint whose state changed
// type fails once, with the worker's error naming the state and both
// types, under a restart strategy that would restart it a thousand times:
// the worker marks the failure non-recoverable (a restart would restore
// the same savepoint and fail the same way).
func TestClusterRefusedRestoreDoesNotRestart(t *testing.T) {
	job := func(seen *atomic.Int64, stringState bool) func(env *weir.Environment) {
		return func(env *weir.Environment) {
			src := weir.FromGenerator(env, -1, func(i int64) int64 { return i }).Parallelism(1).UID("src")
			m := weir.Map(src, func(i int64) int64 {
				if seen != nil && seen.Add(1) > 1000 {
					time.Sleep(100 * time.Microsecond) // throttle, not synchronisation
				}
				return i
			})
			keyed := weir.KeyBy(m, func(i int64) int64 { return i % 7 }, codec.Int64())
			var sums *weir.Stream[int64]
			if stringState {
				sums = weir.Process(keyed, func() weir.KeyedProcessFunction[int64, int64, int64] {
					var st *state.ValueState[string]
					return weir.ProcessFunc(func(c *weir.RuntimeContext) (err error) {
						st, err = weir.ValueState(c, "sum", codec.String())
						return err
					}, func(_ int64, v int64, out *weir.Collector[int64]) error { return st.Update("x") })
				})
			} else {
				sums = weir.Process(keyed, func() weir.KeyedProcessFunction[int64, int64, int64] {
					var st *state.ValueState[int64]
					return weir.ProcessFunc(func(c *weir.RuntimeContext) (err error) {
						st, err = weir.ValueState(c, "sum", codec.Int64())
						return err
					}, func(_ int64, v int64, out *weir.Collector[int64]) error {
						s, err := st.Value()
						if err == nil {
							err = st.Update(s + v)
						}
						return err
					})
				})
			}
			weir.Discard(sums.UID("sum"))
		}
	}
	var seen atomic.Int64
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
	job(&seen, false)(env)
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	for seen.Load() < 1000 {
		time.Sleep(5 * time.Millisecond) // polls a counter; the test's context bounds the run
	}
	sp, err := j.TriggerSavepoint(testCtx(t), t.TempDir())
	require.NoError(t, err)
	j.Cancel()
	_, _ = j.Wait()

	res, err := runClusterCkpt(t, weir.CheckpointConfig{Interval: 20 * time.Millisecond}, weir.ClusterConfig{}, weir.WorkerConfig{},
		job(nil, true), nil, weir.WithRestoreFrom(sp), weir.WithRestartStrategy(weir.FixedDelayRestart(1000, time.Millisecond)))
	require.Error(t, err)
	require.ErrorContains(t, err, `state "sum" restored from the checkpoint as value of int64, declared now as value of string`)
	require.ErrorContains(t, err, "will not restart (a restart would restore the same state and fail the same way)")
	require.NotNil(t, res)
	require.Zero(t, res.Restarts, "%v", err)
	require.ErrorIs(t, err, state.ErrIncompatibleState, "the refusal keeps its identity across processes")
}
