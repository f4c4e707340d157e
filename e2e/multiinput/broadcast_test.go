package multiinput_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
)

// gatedReader emits one value once open is closed, then ends.
type gatedReader struct {
	open <-chan struct{}
	done bool
}

func (r *gatedReader) Poll() (string, weir.ReadStatus, error) {
	if r.done {
		return "", weir.EndOfInput, nil
	}
	select {
	case <-r.open:
		r.done = true
		return "report", weir.Read, nil
	default:
		return "", weir.NothingAvailable, nil
	}
}

func (r *gatedReader) Available() <-chan struct{} { return r.open }

// counter counts its keys' values; a broadcast "report", which comes
// only after every value was counted, emits each key's count through
// ApplyToKeyedState and clears it.
type counter struct {
	count   *state.ValueState[int64]
	counted func()
}

func (f *counter) Open(rc *weir.RuntimeContext) (err error) {
	f.count, err = weir.ValueState(rc, "count", codec.Int64())
	return err
}

func (f *counter) ProcessElement(_ int64, _ int64, _ *weir.Collector[string]) error {
	n, err := f.count.Value()
	if err != nil {
		return err
	}
	f.counted()
	return f.count.Update(n + 1)
}

func (f *counter) ProcessBroadcastElement(_ string, ctx *weir.BroadcastContext[int64], out *weir.Collector[string]) error {
	return ctx.ApplyToKeyedState("count", func(key int64) error {
		n, err := f.count.Value()
		if err != nil {
			return err
		}
		out.Emit(fmt.Sprintf("%d %d", key, n))
		return f.count.Clear()
	})
}

// ApplyToKeyedState reaches every key of the subtask that has the state,
// each current in turn.
func TestApplyToKeyedState(t *testing.T) {
	const n, keys = 1000, 17
	env := weir.NewEnvironment(weir.WithParallelism(1))
	open := make(chan struct{})
	var seen atomic.Int64
	var once sync.Once
	counted := func() {
		if seen.Add(1) == n {
			once.Do(func() { close(open) })
		}
	}
	values := weir.FromGenerator(env, n, func(i int64) int64 { return i % keys })
	report := weir.FromPollingReader(env, "report", func(int, int) (weir.PollingReader[string], error) { return &gatedReader{open: open}, nil })
	out := weir.KeyedBroadcastProcess(weir.KeyBy(values, func(v int64) int64 { return v }, codec.Int64()), weir.Broadcast(report),
		func() weir.KeyedBroadcastProcessFunction[int64, int64, string, string] {
			return &counter{counted: counted}
		})
	got, _ := weir.Collect(out)
	_, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	var want []string
	for k := range int64(keys) {
		want = append(want, fmt.Sprintf("%d %d", k, (n-k+keys-1)/keys))
	}
	vs := got.Values()
	slices.Sort(vs)
	slices.Sort(want)
	require.Equal(t, want, vs)
}

// ruled multiplies every value by the factor of the broadcast state; the
// broadcast side sets it, and arrived is called once it did.
type ruled struct {
	rules   *weir.BroadcastMap[string, int64]
	arrived func()
}

var rulesDesc = weir.MapStateDescriptor[string, int64]{Name: "rules"}

func (f *ruled) Open(rc *weir.RuntimeContext) (err error) {
	f.rules, err = weir.GetBroadcastState(rc, rulesDesc)
	return err
}

func (f *ruled) ProcessElement(v int64, out *weir.Collector[int64]) error {
	if err := f.rules.Put("factor", 0); err != weir.ErrBroadcastStateReadOnly {
		return fmt.Errorf("a write of the non-broadcast side: %v, want ErrBroadcastStateReadOnly", err)
	}
	m, _ := f.rules.Get("factor")
	out.Emit(v * m)
	return nil
}

func (f *ruled) ProcessBroadcastElement(r int64, _ *weir.Collector[int64]) error {
	defer f.arrived()
	return f.rules.Put("factor", r)
}

// A non-keyed broadcast process function: the broadcast side writes the
// state that every subtask reads. The values wait until every subtask has
// the rule, so every value is multiplied by it.
func TestBroadcastProcess(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			const n, p = 500, 3
			env := weir.NewEnvironment(tr.opt, weir.WithParallelism(p))
			open := make(chan struct{})
			var arrived atomic.Int64
			values := weir.FromPollingReader(env, "values", func(sub, par int) (weir.PollingReader[int64], error) {
				return &afterReader{open: open, i: int64(sub), step: int64(par), n: n}, nil
			})
			rules := weir.Broadcast(weir.FromGenerator(env, 1, func(int64) int64 { return 7 }).Parallelism(1), rulesDesc)
			out := weir.BroadcastProcess(values, rules, func() weir.BroadcastProcessFunction[int64, int64, int64] {
				return &ruled{arrived: func() {
					if arrived.Add(1) == p {
						close(open)
					}
				}}
			})
			got, _ := weir.Collect(out)
			_, err := env.Execute(testCtx(t))
			require.NoError(t, err)
			want := make([]int64, n)
			for i := range want {
				want[i] = 7 * int64(i)
			}
			require.Equal(t, want, sorted(got.Values()))
		})
	}
}

// afterReader emits i, i+step, … below n once open is closed.
type afterReader struct {
	open       <-chan struct{}
	i, step, n int64
}

func (r *afterReader) Poll() (int64, weir.ReadStatus, error) {
	select {
	case <-r.open:
	default:
		return 0, weir.NothingAvailable, nil
	}
	if r.i >= r.n {
		return 0, weir.EndOfInput, nil
	}
	v := r.i
	r.i += r.step
	return v, weir.Read, nil
}

func (r *afterReader) Available() <-chan struct{} { return r.open }
