package weir_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
)

// Start runs the checks registered with CheckBeforeRun, with its context,
// before any task: the first error is Start's and no record is read.
func TestCheckBeforeRun(t *testing.T) {
	env := weir.NewEnvironment(weir.WithParallelism(1))
	var read atomic.Int64
	src := weir.FromGenerator(env, 10, func(i int64) int64 { read.Add(1); return i })
	weir.SinkFunc(src, func(int64) error { return nil })
	type key struct{}
	ctx := context.WithValue(t.Context(), key{}, "start's")
	var calls []string
	env.CheckBeforeRun(func(c context.Context) error {
		calls = append(calls, "first:"+c.Value(key{}).(string))
		return nil
	})
	env.CheckBeforeRun(func(context.Context) error { calls = append(calls, "second"); return errors.New("server unreachable") })
	env.CheckBeforeRun(func(context.Context) error { calls = append(calls, "third"); return nil })
	_, err := env.Execute(ctx)
	require.EqualError(t, err, "server unreachable")
	require.Equal(t, []string{"first:start's", "second"}, calls)
	require.Zero(t, read.Load())
}
