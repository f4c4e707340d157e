package eventtime

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/internal/clock"
)

// recorder is an Output that writes down every call.
type recorder struct{ got []string }

func (r *recorder) EmitWatermark(wm int64) { r.got = append(r.got, fmt.Sprintf("watermark %d", wm)) }
func (r *recorder) MarkIdle()              { r.got = append(r.got, "idle") }
func (r *recorder) MarkActive()            { r.got = append(r.got, "active") }

// take returns what was recorded since the last take.
func (r *recorder) take() []string {
	got := r.got
	r.got = nil
	return got
}

// genStep is one step of a generator table test: a record with timestamp
// ts (if event), or a periodic emit; then what the output must have seen.
type genStep struct {
	event bool
	ts    int64
	want  []string
}

func ev(ts int64, want ...string) genStep { return genStep{event: true, ts: ts, want: want} }
func emit(want ...string) genStep         { return genStep{want: want} }

func runGenSteps(t *testing.T, g Generator, steps []genStep) {
	t.Helper()
	var out recorder
	for i, s := range steps {
		if s.event {
			g.OnEvent(s.ts, &out)
		} else {
			g.OnPeriodicEmit(&out)
		}
		require.Equal(t, s.want, out.take(), "step %d (%+v)", i, s)
	}
}

func TestBoundedOutOfOrderness(t *testing.T) {
	const (
		minTs = math.MinInt64
		maxTs = math.MaxInt64
	)
	for _, tc := range []struct {
		name  string
		bound time.Duration
		steps []genStep
	}{
		{"nothing before the first record", 0, []genStep{
			emit(), emit(), ev(10), emit("watermark 9"),
		}},
		{"the highest timestamp minus the bound minus 1", 3 * time.Second, []genStep{
			ev(10_000), ev(12_000), ev(11_000), emit("watermark 8999"),
			ev(12_500), emit("watermark 9499"),
		}},
		{"late records do not lower it and nothing repeats", 5 * time.Millisecond, []genStep{
			ev(100), emit("watermark 94"), emit(),
			ev(50), emit(), ev(100), emit(),
			ev(101), emit("watermark 95"),
		}},
		{"only periodic emits write", time.Millisecond, []genStep{
			ev(5), ev(7), emit("watermark 5"),
		}},
		{"negative timestamps", 0, []genStep{
			ev(-50), emit("watermark -51"), ev(-40), emit("watermark -41"),
		}},
		{"a bound in whole milliseconds", 1999 * time.Microsecond, []genStep{
			ev(10), emit("watermark 8"),
		}},
		{"records without a timestamp do not count", 0, []genStep{
			ev(NoTimestamp), emit(), ev(minTs + 1), emit(), ev(minTs + 2), emit(fmt.Sprintf("watermark %d", int64(minTs+1))),
		}},
		{"a timestamp near MIN does not underflow", 10 * time.Millisecond, []genStep{
			ev(minTs + 5), emit(), ev(minTs + 11), emit(), ev(minTs + 12), emit(fmt.Sprintf("watermark %d", int64(minTs+1))),
		}},
		{"MAX timestamp", 0, []genStep{
			ev(maxTs), emit(fmt.Sprintf("watermark %d", int64(maxTs-1))), ev(maxTs), emit(),
		}},
		{"the largest bound", time.Duration(math.MaxInt64), []genStep{
			ev(minTs), emit(), ev(0), emit("watermark -9223372036855"), ev(maxTs),
			emit(fmt.Sprintf("watermark %d", int64(maxTs)-time.Duration(math.MaxInt64).Milliseconds()-1)),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := NewBoundedOutOfOrderness(tc.bound)
			require.NoError(t, err)
			runGenSteps(t, g, tc.steps)
		})
	}
}

func TestMonotonousTimestamps(t *testing.T) {
	runGenSteps(t, NewMonotonousTimestamps(), []genStep{
		emit(), ev(1), ev(2), emit("watermark 1"), ev(3), emit("watermark 2"), emit(),
	})
}

func TestNewBoundedOutOfOrdernessRejectsNegativeBound(t *testing.T) {
	for _, d := range []time.Duration{-1, -time.Second, math.MinInt64} {
		g, err := NewBoundedOutOfOrderness(d)
		require.Nil(t, g)
		require.ErrorIs(t, err, ErrInvalidArgument)
	}
	_, err := NewBoundedOutOfOrderness(0)
	require.NoError(t, err)
}

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func TestIdleness(t *testing.T) {
	// Each step: a record (ts), a periodic emit, or the clock moving.
	type step struct {
		advance time.Duration // move the clock first
		event   bool
		ts      int64
		want    []string
	}
	at := func(d time.Duration, want ...string) step { return step{advance: d, want: want} }
	rec := func(ts int64, want ...string) step { return step{event: true, ts: ts, want: want} }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a stream without records goes idle", []step{
			at(0),           // the quiet period starts here
			at(time.Second), // exactly the timeout: not more
			at(time.Nanosecond, "idle"),
			at(time.Hour), // once
		}},
		{"records keep it active", []step{
			rec(10), at(0, "watermark 9"),
			rec(20), at(time.Hour, "watermark 19"),
			rec(30), at(time.Hour, "watermark 29"),
		}},
		{"the quiet period starts at the first emit without records", []step{
			rec(10), at(0, "watermark 9"),
			at(10 * time.Second), // starts the quiet period
			at(time.Second),
			at(time.Millisecond, "idle"),
		}},
		{"a record ends the quiet period", []step{
			at(0), at(900 * time.Millisecond),
			rec(5), at(200*time.Millisecond, "watermark 4"), // restarts nothing yet
			at(100 * time.Millisecond), // quiet from here
			at(time.Second),
			at(time.Millisecond, "idle"),
		}},
		{"the next record marks it active, before the wrapped generator sees it", []step{
			rec(10), at(0, "watermark 9"), at(0), at(2*time.Second, "idle"),
			rec(11, "active"), rec(12), at(0, "watermark 11"),
			at(0), at(2*time.Second, "idle"),
		}},
		{"no watermark while idle", []step{
			rec(10), at(0, "watermark 9"), at(0), at(2*time.Second, "idle"),
			at(time.Second), at(time.Second),
			rec(8, "active"), at(0), // 8 is late: no new watermark
			rec(100), at(0, "watermark 99"),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewManual(epoch)
			inner := NewMonotonousTimestamps()
			g, err := NewIdleness(inner, time.Second, clk.Now)
			require.NoError(t, err)
			var out recorder
			idle := false
			for i, s := range tc.steps {
				if s.event {
					g.OnEvent(s.ts, &out)
				} else {
					clk.Advance(s.advance)
					g.OnPeriodicEmit(&out)
				}
				require.Equal(t, s.want, out.take(), "step %d (%+v)", i, s)
				for _, w := range s.want {
					idle = w == "idle" || idle && w != "active"
				}
				require.Equal(t, idle, g.Idle(), "step %d", i)
			}
		})
	}
}

// Quiet is how long the stream has been quiet by the clock, counted from
// the periodic emit that began the quiet period, and 0 after a record.
func TestIdlenessQuiet(t *testing.T) {
	clk := clock.NewManual(epoch)
	g, err := NewIdleness(NewMonotonousTimestamps(), time.Second, clk.Now)
	require.NoError(t, err)
	var out recorder
	require.Zero(t, g.Quiet())
	g.OnPeriodicEmit(&out) // begins the quiet period
	clk.Advance(300 * time.Millisecond)
	require.Equal(t, 300*time.Millisecond, g.Quiet())
	g.OnEvent(5, &out)
	require.Zero(t, g.Quiet(), "a record ends it")
	g.OnPeriodicEmit(&out)
	clk.Advance(time.Hour)
	require.Zero(t, g.Quiet(), "the emit after a record begins none")
	g.OnPeriodicEmit(&out)
	clk.Advance(2 * time.Second)
	require.Equal(t, 2*time.Second, g.Quiet())
}

func TestNewIdlenessRejectsBadArguments(t *testing.T) {
	clk := clock.NewManual(epoch)
	inner := NewMonotonousTimestamps()
	for name, f := range map[string]func() (*Idleness, error){
		"zero timeout":     func() (*Idleness, error) { return NewIdleness(inner, 0, clk.Now) },
		"negative timeout": func() (*Idleness, error) { return NewIdleness(inner, -time.Second, clk.Now) },
		"no generator":     func() (*Idleness, error) { return NewIdleness(nil, time.Second, clk.Now) },
		"no clock":         func() (*Idleness, error) { return NewIdleness(inner, time.Second, nil) },
	} {
		g, err := f()
		require.Nil(t, g, name)
		require.ErrorIs(t, err, ErrInvalidArgument, name)
	}
	g, err := NewIdleness(inner, time.Nanosecond, clk.Now)
	require.NoError(t, err)
	require.False(t, g.Idle())
}

func TestDedupOutput(t *testing.T) {
	var rec recorder
	d := NewDedupOutput(&rec)
	require.Equal(t, MinWatermark, d.Watermark())
	require.Equal(t, Active, d.Status())
	for _, tc := range []struct {
		call func()
		want []string
	}{
		{func() { d.EmitWatermark(MinWatermark) }, nil},
		{func() { d.EmitWatermark(5) }, []string{"watermark 5"}},
		{func() { d.EmitWatermark(5) }, nil},
		{func() { d.EmitWatermark(4) }, nil},
		{func() { d.MarkActive() }, nil},
		{func() { d.MarkIdle() }, []string{"idle"}},
		{func() { d.MarkIdle() }, nil},
		{func() { d.EmitWatermark(5) }, nil}, // not above: stays idle
		{func() { d.EmitWatermark(6) }, []string{"active", "watermark 6"}},
		{func() { d.MarkIdle() }, []string{"idle"}},
		{func() { d.MarkActive() }, []string{"active"}},
		{func() { d.EmitWatermark(MaxWatermark) }, []string{fmt.Sprintf("watermark %d", MaxWatermark)}},
		{func() { d.EmitWatermark(MaxWatermark) }, nil},
	} {
		tc.call()
		require.Equal(t, tc.want, rec.take())
	}
	require.Equal(t, MaxWatermark, d.Watermark())
	require.PanicsWithValue(t, "eventtime: NewDedupOutput(nil)", func() { NewDedupOutput(nil) })
}

// A generator that repeats itself, behind a DedupOutput, reaches the
// stream strictly increasing.
func TestDedupOutputBehindIdleness(t *testing.T) {
	clk := clock.NewManual(epoch)
	g, err := NewIdleness(repeater{}, time.Second, clk.Now)
	require.NoError(t, err)
	var rec recorder
	out := NewDedupOutput(&rec)
	g.OnEvent(7, out)
	g.OnPeriodicEmit(out)
	g.OnPeriodicEmit(out)
	clk.Advance(2 * time.Second)
	g.OnPeriodicEmit(out)
	g.OnPeriodicEmit(out)
	g.OnEvent(7, out)
	g.OnPeriodicEmit(out)
	require.Equal(t, []string{"watermark 7", "idle", "active"}, rec.take())
	require.Equal(t, Active, out.Status())
}

// repeater emits its last timestamp on every call.
type repeater struct{}

func (repeater) OnEvent(ts int64, out Output) { out.EmitWatermark(ts) }
func (repeater) OnPeriodicEmit(Output)        {}

// TestBoundedOutOfOrdernessAgainstBigInts compares the generator with a
// model that computes in unbounded integers over random histories, bounds
// and timestamps near both ends of int64 included.
func TestBoundedOutOfOrdernessAgainstBigInts(t *testing.T) {
	seed := *valveSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, 0xb0))
	pick := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return math.MinInt64 + rng.Int64N(1000)
		case 1:
			return math.MaxInt64 - rng.Int64N(1000)
		default:
			return rng.Int64N(2000) - 1000
		}
	}
	for run := range 2000 {
		var bound time.Duration
		switch rng.IntN(3) {
		case 0:
			bound = time.Duration(rng.Int64N(20)) * time.Millisecond
		case 1:
			bound = time.Duration(math.MaxInt64 - rng.Int64N(1000))
		default:
			bound = time.Duration(rng.Int64N(math.MaxInt64))
		}
		g, err := NewBoundedOutOfOrderness(bound)
		require.NoError(t, err)
		var (
			out     recorder
			highest *big.Int // nil before the first record
			last    = big.NewInt(math.MinInt64)
			want    []string
		)
		for range 1 + rng.IntN(30) {
			if rng.IntN(3) > 0 {
				ts := pick()
				g.OnEvent(ts, &out)
				if highest == nil || big.NewInt(ts).Cmp(highest) > 0 {
					highest = big.NewInt(ts)
				}
				continue
			}
			g.OnPeriodicEmit(&out)
			if highest != nil {
				wm := new(big.Int).Sub(highest, big.NewInt(bound.Milliseconds()+1))
				if wm.Cmp(last) > 0 {
					last = wm
					want = append(want, "watermark "+wm.String())
				}
			}
		}
		require.Equal(t, want, out.take(), "run %d, bound %v; reproduce with -valve.seed=%d", run, bound, seed)
	}
}
