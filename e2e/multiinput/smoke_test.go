package multiinput_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
)

var transports = []struct {
	name string
	opt  weir.Option
}{
	{"local", weir.WithTCPExchanges(false)},
	{"tcp", weir.WithTCPExchanges(true)},
}

// A union of streams of different parallelism, one of them twice, has
// every value of each, as often as it appears.
func TestUnionOfStreams(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			env := weir.NewEnvironment(tr.opt, weir.WithParallelism(2))
			a := weir.FromGenerator(env, 100, func(i int64) int64 { return i })
			b := weir.FromGenerator(env, 50, func(i int64) int64 { return 1000 + i }).Parallelism(3)
			u := weir.Map(weir.Union(a, b, a.Rebalance()), func(v int64) int64 { return v * 2 })
			got, _ := weir.Collect(u)
			_, err := env.Execute(testCtx(t))
			require.NoError(t, err)
			var want []int64
			for i := range int64(100) {
				want = append(want, 2*i, 2*i)
			}
			for i := range int64(50) {
				want = append(want, 2*(1000+i))
			}
			require.Equal(t, sorted(want), sorted(got.Values()))
		})
	}
}

// CoMap reads two streams of different types and parallelism; a stream
// connected to one derived from it works.
func TestCoMapConnectsDerivedStreams(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			env := weir.NewEnvironment(tr.opt, weir.WithParallelism(2))
			a := weir.FromGenerator(env, 100, func(i int64) int64 { return i })
			b := weir.Map(a, func(v int64) string { return fmt.Sprint(v) }).Parallelism(3)
			c := weir.CoMap(weir.Connect(a, b), func(v int64) string { return fmt.Sprintf("a%d", v) }, func(s string) string { return "b" + s })
			got, _ := weir.Collect(c)
			_, err := env.Execute(testCtx(t))
			require.NoError(t, err)
			var want []string
			for i := range 100 {
				want = append(want, fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i))
			}
			require.Equal(t, sorted(want), sorted(got.Values()))
		})
	}
}

func sorted[T int64 | int | string](v []T) []T {
	slices.Sort(v)
	return v
}

// A keyed co-process function sees the keyed state of a key from both
// inputs and its timers fire for that key.
func TestKeyedCoProcessSharesStateAndTimers(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			env := weir.NewEnvironment(tr.opt, weir.WithParallelism(2))
			stamp := weir.MonotonousTimestamps(func(v int64) int64 { return v })
			a := weir.AssignTimestamps(weir.FromGenerator(env, 1000, func(i int64) int64 { return i }), stamp)
			b := weir.AssignTimestamps(weir.FromGenerator(env, 500, func(i int64) int64 { return 2 * i }).Parallelism(1), stamp)
			ka := weir.KeyBy(a, func(v int64) int64 { return v % 7 }, codec.Int64())
			kb := weir.KeyBy(b, func(v int64) int64 { return v % 7 }, codec.Int64())
			sums := weir.KeyedCoProcess(weir.ConnectKeyed(ka, kb), newSumBoth)
			got, _ := weir.Collect(sums)
			_, err := env.Execute(testCtx(t))
			require.NoError(t, err)
			want := map[int64]int64{}
			for i := range int64(1000) {
				want[i%7] += i
			}
			for i := range int64(500) {
				want[(2*i)%7] += 2 * i
			}
			var ws []string
			for k, v := range want {
				ws = append(ws, fmt.Sprintf("%d=%d", k, v))
			}
			require.Equal(t, sorted(ws), sorted(got.Values()))
		})
	}
}

// keyedSum keeps a per-key sum over both inputs and emits it at the end
// of event time, from an event-time timer.
type keyedSum struct {
	sum *state.ValueState[int64]
	rc  *weir.RuntimeContext
}

func newSumBoth() weir.KeyedCoProcessFunction[int64, int64, int64, string] {
	return &keyedSum{}
}

func (f *keyedSum) Open(rc *weir.RuntimeContext) error {
	st, err := weir.ValueState(rc, "sum", codec.Int64())
	if err != nil {
		return err
	}
	f.rc, f.sum = rc, st
	return nil
}

func (f *keyedSum) add(v int64) error {
	s, err := f.sum.Value()
	if err != nil {
		return err
	}
	if err := f.sum.Update(s + v); err != nil {
		return err
	}
	return f.rc.Timers().RegisterEventTimeTimer(1 << 40)
}

func (f *keyedSum) ProcessElement1(_ int64, v int64, _ *weir.Collector[string]) error {
	return f.add(v)
}
func (f *keyedSum) ProcessElement2(_ int64, v int64, _ *weir.Collector[string]) error {
	return f.add(v)
}

func (f *keyedSum) OnTimer(key int64, _ int64, _ weir.TimeDomain, out *weir.Collector[string]) error {
	s, err := f.sum.Value()
	if err != nil {
		return err
	}
	out.Emit(fmt.Sprintf("%d=%d", key, s))
	return nil
}

// evenOdd is a co-process function counting its values in operator state;
// odd values go to a side output, and a processing-time timer reports the
// count once.
type evenOdd struct {
	rc    *weir.RuntimeContext
	count *state.OperatorListState[int64]
	n     int64
	armed bool
}

var odd = weir.NewOutputTag[int64]("odd")

func (f *evenOdd) Open(rc *weir.RuntimeContext) error {
	st, err := weir.OperatorListState(rc, "count", codec.Int64())
	f.rc, f.count = rc, st
	return err
}

func (f *evenOdd) process(v int64, out *weir.Collector[string]) error {
	f.n++
	if err := f.count.Update([]int64{f.n}); err != nil {
		return err
	}
	if v%2 != 0 {
		weir.Output(f.rc, odd, v)
		return nil
	}
	if !f.armed {
		f.armed = true
		return f.rc.Timers().RegisterProcessingTimeTimer(f.rc.Timers().CurrentProcessingTime())
	}
	out.Emit(fmt.Sprint(v))
	return nil
}

func (f *evenOdd) ProcessElement1(v int64, out *weir.Collector[string]) error {
	return f.process(v, out)
}
func (f *evenOdd) ProcessElement2(v string, out *weir.Collector[string]) error {
	var n int64
	fmt.Sscan(v, &n)
	return f.process(n, out)
}

func (f *evenOdd) OnTimer(int64, *weir.Collector[string]) error {
	weir.Output(f.rc, odd, -1) // the timer fired
	return nil
}

// A co-process function emits to a side output, and its processing-time
// timer fires; the side stream has its own consumers.
func TestCoProcessSideOutputAndTimer(t *testing.T) {
	env := weir.NewEnvironment(weir.WithParallelism(1))
	a := weir.FromGenerator(env, 100, func(i int64) int64 { return i })
	b := weir.FromGenerator(env, 100, func(i int64) string { return fmt.Sprint(100 + i) })
	main := weir.CoProcess(weir.Connect(a, b), func() weir.CoProcessFunction[int64, string, string] { return &evenOdd{} })
	sideVals, _ := weir.Collect(weir.SideOutput(main, odd))
	mainVals, _ := weir.Collect(main)
	_, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	var wantOdd []int64
	for i := range int64(200) {
		if i%2 != 0 {
			wantOdd = append(wantOdd, i)
		}
	}
	got := sideVals.Values()
	timers := slices.Index(got, -1)
	require.GreaterOrEqual(t, timers, 0, "the timer fired")
	got = slices.Delete(got, timers, timers+1)
	require.Equal(t, wantOdd, sorted(got))
	require.Len(t, mainVals.Values(), 99) // every even value but the one that armed the timer
}

// A stream connected to itself, over TCP too: its values reach both
// inputs, through partitions of their own.
func TestConnectStreamToItself(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			env := weir.NewEnvironment(tr.opt, weir.WithParallelism(2))
			a := weir.FromGenerator(env, 100, func(i int64) int64 { return i })
			c := weir.CoMap(weir.Connect(a, a.Rebalance()), func(v int64) int64 { return v }, func(v int64) int64 { return -v - 1 })
			got, _ := weir.Collect(c)
			_, err := env.Execute(testCtx(t))
			require.NoError(t, err)
			var want []int64
			for i := range int64(100) {
				want = append(want, i, -i-1)
			}
			require.Equal(t, sorted(want), sorted(got.Values()))
		})
	}
}
