package weir_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
)

// point is a struct type without a codec of its own.
type point struct{ X, Y int64 }

var pointCodec = codec.Struct2(codec.Int64(), func(p point) int64 { return p.X },
	codec.Int64(), func(p point) int64 { return p.Y }, func(x, y int64) point { return point{x, y} })

// A value that needs a codec and has none is an error from Execute,
// before the job reads any record, naming the operator, the Go type and
// the call that fixes it: a checkpointed Collect sink, the accumulator of
// a window aggregate, a two-phase-commit sink's transactions, a stream
// crossing a task boundary.
func TestMissingCodecFailsAtExecute(t *testing.T) {
	ckpt := weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond})
	for _, tc := range []struct {
		name  string
		opts  []weir.Option
		build func(src *weir.Stream[point])
		want  []string
	}{
		{"collect", []weir.Option{ckpt}, func(src *weir.Stream[point]) { weir.Collect(src) },
			[]string{"collect sink collect: with checkpointing on, its values are checkpointed, but their type weir_test.point has no codec",
				"call WithCodec on the stream passed to Collect, with a codec.Codec[weir_test.point]"}},
		{"window accumulator", nil, func(src *weir.Stream[point]) {
			keyed := weir.KeyBy(weir.AssignTimestamps(src.WithCodec(pointCodec), weir.MonotonousTimestamps(func(p point) int64 { return p.X })),
				func(p point) int64 { return p.Y }, codec.Int64())
			weir.Discard(weir.WindowAggregate(weir.Window(keyed, weir.TumblingWindows(time.Second)), weir.AggregateFunction[point, point, int64]{
				New: func() point { return point{} }, Add: func(a, p point) point { return point{a.X + p.X, 0} },
				Result: func(a point) int64 { return a.X }}, nil).Name("sums"))
		}, []string{"operator sums: its accumulators are keyed state, but their type weir_test.point has no codec",
			"set AggregateFunction.Codec, with a codec.Codec[weir_test.point]"}},
		{"two-phase-commit transactions", []weir.Option{ckpt}, func(src *weir.Stream[point]) {
			weir.TwoPhaseCommitSink(src, nil, func(int, int) (weir.TwoPhaseCommitter[point, point], error) { return nil, nil })
		}, []string{"sink two-phase-commit sink: its open transactions are checkpointed, but their type weir_test.point has no codec",
			"pass one to TwoPhaseCommitSink as txnCodec"}},
		{"task boundary", nil, func(src *weir.Stream[point]) {
			weir.Discard(weir.Map(src, func(p point) point { return p }).Name("shift").Rebalance())
		},
			[]string{"operator shift: its output crosses a task boundary, so it is serialized, but its type weir_test.point has no codec",
				"call WithCodec on the stream it returns, with a codec.Codec[weir_test.point]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var generated atomic.Int64
			env := weir.NewEnvironment(tc.opts...)
			tc.build(weir.FromGenerator(env, 1000, func(i int64) point { generated.Add(1); return point{i, i % 3} }))
			res, err := env.Execute(testCtx(t))
			require.Nil(t, res, "the job did not run")
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
			require.Zero(t, generated.Load(), "no record was read")
		})
	}
}

// Without checkpointing a Collect sink needs no codec; with one set after
// Collect was called, the checkpointed job runs.
func TestCollectCodec(t *testing.T) {
	env := weir.NewEnvironment()
	got, _ := weir.Collect(weir.FromSlice(env, []point{{1, 2}}))
	_, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, []point{{1, 2}}, got.Values())

	env = weir.NewEnvironment(weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond}))
	src := weir.FromSlice(env, []point{{1, 2}})
	got, _ = weir.Collect(src)
	src.WithCodec(pointCodec)
	_, err = env.Execute(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, []point{{1, 2}}, got.Values())
}
