package window_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime/window"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
)

func sum(a, b int64) int64 { return a + b }

func newBackend(t testing.TB, maxPar, par, index int) *heap.Backend {
	b, err := heap.New(heap.Config{MaxParallelism: maxPar, Parallelism: par, Index: index})
	require.NoError(t, err)
	return b
}

func groupOf(key string, maxPar int) int {
	return keygroup.ForHash(codec.Hash64([]byte(key)), maxPar)
}

// lines records emissions as text.
type lines struct{ out []string }

func (l *lines) Emit(key []byte, w window.Window, r int64) error {
	l.out = append(l.out, fmt.Sprintf("fire %s %s %d", key, w, r))
	return nil
}

func (l *lines) Late(key []byte, ts int64, v int64) error {
	l.out = append(l.out, fmt.Sprintf("late %s %d %d", key, ts, v))
	return nil
}

func TestConfigValidation(t *testing.T) {
	clock := func() int64 { return 0 }
	tumbling := window.TumblingWindows(10, 0)
	bad := map[string]window.Config{
		"no assigner":                   {},
		"size 0":                        {Assigner: window.TumblingWindows(0, 0)},
		"negative size":                 {Assigner: window.TumblingWindows(-10, 0)},
		"offset = size":                 {Assigner: window.TumblingWindows(10, 10)},
		"offset = -size":                {Assigner: window.TumblingWindows(10, -10)},
		"offset min int64":              {Assigner: window.TumblingWindows(10, math.MinInt64)},
		"sliding size 0":                {Assigner: window.SlidingWindows(0, 5, 0)},
		"slide 0":                       {Assigner: window.SlidingWindows(10, 0, 0)},
		"negative slide":                {Assigner: window.SlidingWindows(10, -5, 0)},
		"sliding offset = slide":        {Assigner: window.SlidingWindows(10, 5, 5)},
		"sliding offset = -slide":       {Assigner: window.SlidingWindows(10, 5, -5)},
		"too many sliding windows":      {Assigner: window.SlidingWindows(10_000_001, 1, 0)},
		"gap 0":                         {Assigner: window.SessionWindows(0)},
		"negative gap":                  {Assigner: window.SessionWindows(-1)},
		"global processing time":        {Assigner: window.GlobalWindows(), Time: window.ProcessingTime, Clock: clock},
		"processing time without clock": {Assigner: tumbling, Time: window.ProcessingTime},
		"unknown time":                  {Assigner: tumbling, Time: 7},
		"count 0":                       {Assigner: tumbling, Trigger: window.CountTrigger(0)},
		"purging count -1":              {Assigner: tumbling, Trigger: window.Purging(window.CountTrigger(-1))},
		"continuous 0":                  {Assigner: tumbling, Trigger: window.ContinuousEventTimeTrigger(0)},
		"continuous processing time": {Assigner: tumbling, Time: window.ProcessingTime, Clock: clock,
			Trigger: window.Purging(window.ContinuousEventTimeTrigger(5))},
		"negative lateness": {Assigner: tumbling, AllowedLateness: -1},
		"name with slash":   {Assigner: tumbling, Name: "a/b"},
	}
	for name, cfg := range bad {
		t.Run(name, func(t *testing.T) {
			require.Error(t, cfg.Validate())
			_, err := window.New(newBackend(t, 128, 1, 0), cfg, window.Reduce(codec.Int64(), sum), &lines{})
			require.Error(t, err)
		})
	}
	good := []window.Config{
		{Assigner: window.SlidingWindows(10_000_000, 1, 0)},
		{Assigner: window.SlidingWindows(3, 5, -4)},
		{Assigner: window.TumblingWindows(math.MaxInt64, math.MaxInt64-1)},
		{Assigner: window.GlobalWindows(), Trigger: window.ContinuousEventTimeTrigger(1)},
		{Assigner: window.SessionWindows(1), Time: window.ProcessingTime, Clock: clock, AllowedLateness: 5},
		{Assigner: tumbling, Trigger: window.Purging(window.Purging(window.EventTimeTrigger()))},
		{Assigner: tumbling, Trigger: window.ProcessingTimeTrigger()},
		{Assigner: tumbling, Trigger: window.NeverTrigger(), AllowedLateness: math.MaxInt64},
	}
	for _, cfg := range good {
		require.NoError(t, cfg.Validate(), "%v %v", cfg.Assigner, cfg.Trigger)
	}

	b := newBackend(t, 128, 1, 0)
	cfg := window.Config{Assigner: tumbling}
	_, err := window.New[int64, int64](nil, cfg, window.Reduce(codec.Int64(), sum), &lines{})
	require.Error(t, err, "no backend")
	_, err = window.New[int64, int64](b, cfg, window.Reduce(codec.Int64(), sum), nil)
	require.Error(t, err, "no output")
	_, err = window.New[int64, int64](b, cfg, window.Function[int64, int64]{}, &lines{})
	require.Error(t, err, "no function")
	_, err = window.New(b, cfg, window.Reduce[int64](nil, sum), &lines{})
	require.Error(t, err, "no codec")
	agg := window.AggregateFunction[int64, int64, int64]{
		Codec: codec.Int64(), New: func() int64 { return 0 }, Add: sum, Result: func(a int64) int64 { return a },
	}
	_, err = window.New(b, window.Config{Assigner: window.SessionWindows(5)}, window.Aggregate(agg), &lines{})
	require.ErrorContains(t, err, "Merge", "sessions merge accumulators")
	_, err = window.New(b, cfg, window.Aggregate(agg), &lines{})
	require.NoError(t, err, "other windows do not need Merge")
	_, err = window.New(b, cfg, window.Aggregate(window.AggregateFunction[int64, int64, int64]{}), &lines{})
	require.Error(t, err)
	_, err = window.New(b, cfg, window.Process[int64, int64](codec.Int64(), nil), &lines{})
	require.Error(t, err)
}

func TestElementErrors(t *testing.T) {
	newOp := func(cfg window.Config) *window.Operator[int64, int64] {
		op, err := window.New(newBackend(t, 128, 1, 0), cfg, window.Reduce(codec.Int64(), sum), &lines{})
		require.NoError(t, err)
		return op
	}
	k := []byte("k")
	kg := groupOf("k", 128)

	op := newOp(window.Config{Assigner: window.TumblingWindows(10, 0)})
	require.ErrorIs(t, op.ProcessElement(k, kg, math.MinInt64, 1), window.ErrNoTimestamp)
	require.ErrorIs(t, op.ProcessElement(k, kg, math.MaxInt64, 1), window.ErrOutOfRange, "end above the maximum")
	require.ErrorIs(t, op.ProcessElement(k, kg, math.MaxInt64-7, 1), window.ErrOutOfRange, "[MAX-7, MAX+3)")
	require.NoError(t, op.ProcessElement(k, kg, math.MaxInt64-8, 1), "[MAX-17, MAX-7)")

	op = newOp(window.Config{Assigner: window.TumblingWindows(10, 5)})
	require.ErrorIs(t, op.ProcessElement(k, kg, math.MinInt64+1, 1), window.ErrOutOfRange, "t - offset below the minimum")

	op = newOp(window.Config{Assigner: window.SlidingWindows(10, 5, 0)})
	require.ErrorIs(t, op.ProcessElement(k, kg, math.MinInt64+1, 1), window.ErrOutOfRange, "t - size")

	op = newOp(window.Config{Assigner: window.SessionWindows(2)})
	require.ErrorIs(t, op.ProcessElement(k, kg, math.MaxInt64-1, 1), window.ErrOutOfRange)
	require.NoError(t, op.ProcessElement(k, kg, math.MaxInt64-2, 1))

	// Processing-time and global windows need no timestamp.
	op = newOp(window.Config{Assigner: window.TumblingWindows(10, 0), Time: window.ProcessingTime, Clock: func() int64 { return 3 }})
	require.NoError(t, op.ProcessElement(k, kg, math.MinInt64, 1))
	op = newOp(window.Config{Assigner: window.GlobalWindows(), Trigger: window.CountTrigger(2)})
	require.NoError(t, op.ProcessElement(k, kg, math.MinInt64, 1))
}

// An element in a key group outside the operator's backend is refused
// with a *state.KeyGroupError (it never reaches the backend, which would
// refuse it too), with serialized keys and with keys held by value.
func TestForeignKeyGroupRefused(t *testing.T) {
	for _, byValue := range []bool{false, true} {
		b := newBackend(t, 128, 2, 1) // key groups 64..127
		op, err := window.New(b, window.Config{Assigner: window.TumblingWindows(10, 0)}, window.Reduce(codec.Int64(), sum), &lines{})
		require.NoError(t, err)
		key := codec.Int64().Append(nil, 7)
		if byValue {
			require.NoError(t, window.UseKeyCodec(op, codec.Int64()))
		}
		require.NoError(t, op.ProcessElement(key, 64, 1, 1))
		for _, g := range []int{0, 63, 128, -1} {
			var kge *state.KeyGroupError
			require.ErrorAs(t, op.ProcessElement(key, g, 1, 1), &kge, "group %d, by value %v", g, byValue)
			require.Equal(t, g, kge.Group)
			require.Equal(t, keygroup.Range{Start: 64, End: 127}, kge.Range)
		}
	}
}

type failingOut struct{ err error }

func (f failingOut) Emit([]byte, window.Window, int64) error { return f.err }
func (f failingOut) Late([]byte, int64, int64) error         { return f.err }

func TestOutputErrors(t *testing.T) {
	boom := errors.New("boom")
	op, err := window.New(newBackend(t, 128, 1, 0),
		window.Config{Assigner: window.TumblingWindows(10, 0), SideOutputLateData: true},
		window.Reduce(codec.Int64(), sum), failingOut{boom})
	require.NoError(t, err)
	k, kg := []byte("k"), groupOf("k", 128)
	require.NoError(t, op.ProcessElement(k, kg, 1, 1))
	require.ErrorIs(t, op.AdvanceWatermark(9), boom)
	require.ErrorIs(t, op.ProcessElement(k, kg, 1, 1), boom, "late element")
}

// A process function sees the key, the window and all elements, and
// emits any number of results, each with the window.
func TestProcessFunction(t *testing.T) {
	type res struct {
		key  string
		w    window.Window
		elem int64
	}
	var got []res
	out := outFunc[res]{emit: func(key []byte, w window.Window, r res) error {
		require.Equal(t, string(key), r.key)
		require.Equal(t, w, r.w)
		got = append(got, r)
		return nil
	}}
	fn := window.Process(codec.Int64(), func(key []byte, w window.Window, elems []int64, emit func(res) error) error {
		for _, e := range elems {
			if e%2 == 0 { // odd elements emit nothing
				if err := emit(res{string(key), w, e}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	op, err := window.New(newBackend(t, 128, 1, 0), window.Config{Assigner: window.TumblingWindows(10, 0)}, fn, out)
	require.NoError(t, err)
	for i, v := range []int64{2, 3, 4, 6} {
		require.NoError(t, op.ProcessElement([]byte("k"), groupOf("k", 128), int64(i), v))
	}
	require.NoError(t, op.AdvanceWatermark(9))
	w := window.Window{Start: 0, End: 10}
	require.Equal(t, []res{{"k", w, 2}, {"k", w, 4}, {"k", w, 6}}, got)
	require.Equal(t, int64(9), w.MaxTimestamp())
	require.Equal(t, "[0,10)", w.String())
	require.Equal(t, "global", window.GlobalWindow().String())
	require.Equal(t, int64(math.MaxInt64), window.GlobalWindow().MaxTimestamp())
	require.True(t, window.GlobalWindow().IsGlobal())
	require.False(t, w.IsGlobal())
}

type outFunc[OUT any] struct {
	emit func(key []byte, w window.Window, r OUT) error
}

func (o outFunc[OUT]) Emit(key []byte, w window.Window, r OUT) error { return o.emit(key, w, r) }
func (o outFunc[OUT]) Late([]byte, int64, int64) error               { return nil }

func TestNextProcessingTime(t *testing.T) {
	now := int64(0)
	out := &lines{}
	op, err := window.New(newBackend(t, 128, 1, 0),
		window.Config{Assigner: window.TumblingWindows(10, 0), Time: window.ProcessingTime, Clock: func() int64 { return now }},
		window.Reduce(codec.Int64(), sum), out)
	require.NoError(t, err)
	_, ok := op.NextProcessingTime()
	require.False(t, ok)
	now = 25
	require.NoError(t, op.ProcessElement([]byte("k"), groupOf("k", 128), 0, 1))
	next, ok := op.NextProcessingTime()
	require.True(t, ok)
	require.Equal(t, int64(29), next)
	require.NoError(t, op.AdvanceProcessingTime(28))
	require.Empty(t, out.out)
	require.NoError(t, op.AdvanceProcessingTime(next))
	require.Equal(t, []string{"fire k [20,30) 1"}, out.out)
	_, ok = op.NextProcessingTime()
	require.False(t, ok)
}

// Two operators with different names share one backend without seeing
// each other's windows or timers.
func TestSharedBackend(t *testing.T) {
	b := newBackend(t, 128, 1, 0)
	outA, outB := &lines{}, &lines{}
	a, err := window.New(b, window.Config{Assigner: window.TumblingWindows(10, 0), Name: "a"}, window.Reduce(codec.Int64(), sum), outA)
	require.NoError(t, err)
	c, err := window.New(b, window.Config{Assigner: window.TumblingWindows(10, 0), Name: "b"}, window.Reduce(codec.Int64(), sum), outB)
	require.NoError(t, err)
	k, kg := []byte("k"), groupOf("k", 128)
	require.NoError(t, a.ProcessElement(k, kg, 1, 1))
	require.NoError(t, c.ProcessElement(k, kg, 2, 10))
	require.NoError(t, c.ProcessElement(k, kg, 3, 10))
	require.NoError(t, a.AdvanceWatermark(9))
	require.Equal(t, []string{"fire k [0,10) 1"}, outA.out)
	require.Empty(t, outB.out)
	require.NoError(t, c.AdvanceWatermark(9))
	require.Equal(t, []string{"fire k [0,10) 20"}, outB.out)
}

// The steady state of an element into an existing window allocates
// nothing.
func TestProcessElementAllocs(t *testing.T) {
	b := newBackend(t, 128, 1, 0)
	op, err := window.New(b, window.Config{Assigner: window.TumblingWindows(1000, 0), AllowedLateness: 10},
		window.Reduce(codec.Int64(), sum), &lines{})
	require.NoError(t, err)
	keys := make([][]byte, 64)
	groups := make([]int, len(keys))
	for i := range keys {
		keys[i] = []byte(fmt.Sprint("key-", i))
		groups[i] = groupOf(string(keys[i]), 128)
		require.NoError(t, op.ProcessElement(keys[i], groups[i], 1, 1))
	}
	i := 0
	allocs := testing.AllocsPerRun(10000, func() {
		j := i % len(keys)
		i++
		_ = op.ProcessElement(keys[j], groups[j], int64(i%1000), 1)
	})
	require.Zero(t, allocs)
}

// Window state is keyed state: restored at other parallelisms, the
// subtasks together emit exactly what the original operator emits, each
// for its own keys.
func TestRestoreRescaled(t *testing.T) {
	const maxPar = 16
	configs := map[string]window.Config{
		"tumbling": {Assigner: window.TumblingWindows(10, 0), AllowedLateness: 5},
		"sliding":  {Assigner: window.SlidingWindows(10, 5, 0), Trigger: window.CountTrigger(3)},
		"session":  {Assigner: window.SessionWindows(4), Trigger: window.ContinuousEventTimeTrigger(3)},
		"global":   {Assigner: window.GlobalWindows(), Trigger: window.Purging(window.CountTrigger(2))},
	}
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			type elem struct {
				key string
				ts  int64
			}
			var before, after []elem
			for i := range 300 {
				e := elem{fmt.Sprint("k", i%37), int64(i * 7 % 50)}
				if i < 200 {
					before = append(before, e)
				} else {
					after = append(after, e)
				}
			}
			run := func(op *window.Operator[int64, int64], b *heap.Backend, es []elem) {
				for i, e := range es {
					g := groupOf(e.key, maxPar)
					if b.KeyGroupRange().Contains(g) {
						require.NoError(t, op.ProcessElement([]byte(e.key), g, e.ts, int64(i)))
					}
				}
				require.NoError(t, op.AdvanceWatermark(20))
				require.NoError(t, op.AdvanceWatermark(1000))
			}
			// The reference: one operator, no restore.
			ref := &lines{}
			rb := newBackend(t, maxPar, 1, 0)
			rop, err := window.New(rb, cfg, window.Reduce(codec.Int64(), sum), ref)
			require.NoError(t, err)
			for i, e := range before {
				require.NoError(t, rop.ProcessElement([]byte(e.key), groupOf(e.key, maxPar), e.ts, int64(i)))
			}
			stor := state.NewMemoryStorage()
			require.NoError(t, rop.PrepareSnapshot())
			snap, err := rb.Snapshot(1, stor)
			require.NoError(t, err)
			h, err := snap(context.Background())
			require.NoError(t, err)
			ref.out = nil // what the restored operators must reproduce starts here
			run(rop, rb, after)
			require.NotEmpty(t, ref.out)
			want := slices.Clone(ref.out)
			slices.Sort(want)

			for _, par := range []int{1, 2, 3} {
				var got []string
				for idx := range par {
					b := newBackend(t, maxPar, par, idx)
					require.NoError(t, b.Restore([]state.KeyedStateHandle{*h}, stor))
					out := &lines{}
					op, err := window.New(b, cfg, window.Reduce(codec.Int64(), sum), out)
					require.NoError(t, err)
					run(op, b, after)
					got = append(got, out.out...)
				}
				slices.Sort(got)
				require.Equal(t, want, got, "parallelism %d", par)
			}
		})
	}
}
