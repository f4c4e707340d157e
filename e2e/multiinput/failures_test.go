package multiinput_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/coordinator"
)

// A keyed co-process function that panics once in its second input and
// once in OnTimer: each panic fails its task, the job restarts, and the
// output is the batch answer all the same.
func TestPanicsInSecondInputAndOnTimerRestartTheJob(t *testing.T) {
	for _, site := range []string{"input 2", "timer"} {
		t.Run(site, func(t *testing.T) {
			var calls atomic.Int64
			var fired atomic.Bool
			restart, err := coordinator.NewFixedDelay(coordinator.FixedDelayConfig{Attempts: 3})
			require.NoError(t, err)
			env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond), weir.WithAutoWatermarkInterval(5*time.Millisecond),
				weir.WithRestartStrategy(restart), weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond}))
			a := stamped(weir.FromGenerator(env, coA, func(i int64) event { return event{i % coKeys, i, i} }, rate(coA, 1)).WithCodec(eventCodec), 2)
			b := stamped(weir.FromGenerator(env, coB, func(i int64) event { return event{i % coKeys, 2 * i, 1} }, rate(coB, 1)).WithCodec(eventCodec), 1)
			key := func(e event) int64 { return e.K }
			out := weir.KeyedCoProcess(weir.ConnectKeyed(weir.KeyBy(a, key, codec.Int64()), weir.KeyBy(b, key, codec.Int64())),
				func() weir.KeyedCoProcessFunction[int64, event, event, string] {
					return &panicking{windowSums: windowSums{hook: func() {}}, site: site, calls: &calls, fired: &fired}
				})
			got, _ := weir.Collect(out)
			res, err := env.Execute(testCtx(t))
			require.NoError(t, err)
			require.Equal(t, 1, res.Restarts)
			requireLines(t, coTimersJob.want(), got.Values(), site)
		})
	}
}

// panicking is windowSums that panics at the 200th call of its site.
type panicking struct {
	windowSums
	site  string
	calls *atomic.Int64
	fired *atomic.Bool
}

func (f *panicking) at(site string) {
	if site == f.site && f.calls.Add(1) == 200 && f.fired.CompareAndSwap(false, true) {
		panic(fmt.Sprintf("injected panic in %s", site))
	}
}

func (f *panicking) ProcessElement2(k int64, e event, out *weir.Collector[string]) error {
	f.at("input 2")
	return f.windowSums.ProcessElement2(k, e, out)
}

func (f *panicking) OnTimer(key, ts int64, d weir.TimeDomain, out *weir.Collector[string]) error {
	f.at("timer")
	return f.windowSums.OnTimer(key, ts, d, out)
}

// quietReader has no value until open is closed; then it ends.
type quietReader struct{ open <-chan struct{} }

func (r quietReader) Poll() (event, weir.ReadStatus, error) {
	select {
	case <-r.open:
		return event{}, weir.EndOfInput, nil
	default:
		return event{}, weir.NothingAvailable, nil
	}
}

func (r quietReader) Available() <-chan struct{} { return r.open }

// An input that has nothing to say and went idle does not hold the keyed
// co-process operator's event time back: the timers of the other input
// fire while it is still open (it ends only once they did). An input far
// behind does hold it back (coTimersJob: a window fires only once both
// inputs passed it).
func TestIdleInputDoesNotHoldBackEventTime(t *testing.T) {
	ctx, cancel := context.WithTimeoutCause(testCtx(t), time.Minute, fmt.Errorf("the idle input held event time back"))
	defer cancel()
	env := weir.NewEnvironment(weir.WithParallelism(1), weir.WithAutoWatermarkInterval(5*time.Millisecond))
	open := make(chan struct{})
	a := stamped(weir.FromGenerator(env, 100, func(i int64) event { return event{0, i, i} }).WithCodec(eventCodec), 1)
	quiet := weir.AssignTimestamps(weir.FromPollingReader(env, "quiet", func(int, int) (weir.PollingReader[event], error) {
		return quietReader{open: open}, nil
	}).WithCodec(eventCodec), weir.MonotonousTimestamps(func(e event) int64 { return e.TS }).WithIdleness(20*time.Millisecond))
	key := func(e event) int64 { return e.K }
	out := weir.KeyedCoProcess(weir.ConnectKeyed(weir.KeyBy(a, key, codec.Int64()), weir.KeyBy(quiet, key, codec.Int64())),
		func() weir.KeyedCoProcessFunction[int64, event, event, string] {
			return &openOnEventTime{windowSums: windowSums{hook: func() {}}, open: open}
		})
	got, _ := weir.Collect(out)
	_, err := env.Execute(ctx)
	require.NoError(t, err)
	require.Contains(t, got.Values(), fmt.Sprintf("0 %d %d 0", windowOf(0), 99*100/2))
}

// openOnEventTime is windowSums that closes open when its first
// event-time timer fires.
type openOnEventTime struct {
	windowSums
	open chan struct{}
	once bool
}

func (f *openOnEventTime) OnTimer(key, ts int64, d weir.TimeDomain, out *weir.Collector[string]) error {
	if d == weir.EventTime && !f.once {
		f.once = true
		close(f.open)
	}
	return f.windowSums.OnTimer(key, ts, d, out)
}
