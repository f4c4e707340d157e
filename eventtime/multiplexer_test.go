package eventtime

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// muxStep is one step of a multiplexer table test: an operation on split
// i, then what the combined output must have seen.
type muxStep struct {
	op   string // add, remove, wm, idle, active, combine
	i    int    // split (by the order of adds)
	ts   int64
	want []string
}

func TestMultiplexer(t *testing.T) {
	tests := []struct {
		name  string
		steps []muxStep
	}{
		{"no split is idle", []muxStep{
			{op: "combine", want: []string{"idle"}},
			{op: "combine"},
		}},
		{"minimum over splits, only when it rises", []muxStep{
			{op: "add"}, {op: "add"}, {op: "combine"},
			{op: "wm", i: 0, ts: 10},
			{op: "wm", i: 1, ts: 5, want: []string{"watermark 5"}},
			{op: "wm", i: 1, ts: 20, want: []string{"watermark 10"}},
			{op: "wm", i: 0, ts: 8},
			{op: "wm", i: 0, ts: 30, want: []string{"watermark 20"}},
		}},
		{"an idle split stops holding back", []muxStep{
			{op: "add"}, {op: "add"},
			{op: "wm", i: 0, ts: 100},
			{op: "idle", i: 1, want: []string{"watermark 100"}},
			{op: "wm", i: 0, ts: 150, want: []string{"watermark 150"}},
			{op: "idle", i: 0, want: []string{"idle"}},
			// Active again, behind: no watermark goes back.
			{op: "active", i: 1, want: []string{"active"}},
			{op: "wm", i: 1, ts: 120},
			{op: "wm", i: 1, ts: 200, want: []string{"watermark 200"}},
		}},
		{"a watermark of an idle split marks it active", []muxStep{
			{op: "add"},
			{op: "idle", i: 0, want: []string{"idle"}},
			{op: "wm", i: 0, ts: 7, want: []string{"active", "watermark 7"}},
		}},
		{"a new split holds back; a removed one stops counting", []muxStep{
			{op: "add"},
			{op: "wm", i: 0, ts: 50, want: []string{"watermark 50"}},
			{op: "add"},
			{op: "wm", i: 0, ts: 60},
			{op: "wm", i: 1, ts: 55, want: []string{"watermark 55"}},
			{op: "remove", i: 1, want: []string{"watermark 60"}},
			{op: "wm", i: 1, ts: 1000},
			{op: "remove", i: 0, want: []string{"idle"}},
		}},
		{"a split added to an idle subtask turns it active", []muxStep{
			{op: "combine", want: []string{"idle"}},
			{op: "add", want: []string{"active"}},
			{op: "wm", i: 0, ts: 1, want: []string{"watermark 1"}},
		}},
		{"the end of event time passes once every split is there", []muxStep{
			{op: "add"}, {op: "add"},
			{op: "wm", i: 0, ts: MaxWatermark},
			{op: "wm", i: 1, ts: MaxWatermark, want: []string{fmt.Sprintf("watermark %d", MaxWatermark)}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r recorder
			m := NewMultiplexer(&r)
			var outs []*SplitOutput
			for n, s := range tt.steps {
				switch s.op {
				case "add":
					outs = append(outs, m.Add())
				case "remove":
					m.Remove(outs[s.i])
				case "wm":
					outs[s.i].EmitWatermark(s.ts)
				case "idle":
					outs[s.i].MarkIdle()
				case "active":
					outs[s.i].MarkActive()
				case "combine":
					m.Combine()
				}
				require.Equal(t, s.want, r.take(), "step %d: %s %d %d", n, s.op, s.i, s.ts)
			}
		})
	}
}

func TestMultiplexerRemoveUnknownPanics(t *testing.T) {
	m := NewMultiplexer(&recorder{})
	s := m.Add()
	m.Remove(s)
	require.Panics(t, func() { m.Remove(s) })
	require.Panics(t, func() { NewMultiplexer(nil) })
}

// refMux is the multiplexer's rules written plainly: every split's state
// in a map, the combination recomputed from scratch after each step.
type refMux struct {
	wm   map[int]int64
	idle map[int]bool
	last int64
	out  string // "", "idle" or "active": what was passed on
}

func (r *refMux) step() []string {
	var got []string
	if len(r.wm) == 0 || !slices.ContainsFunc(mapKeys(r.idle), func(k int) bool { return !r.idle[k] }) {
		if r.out != "idle" {
			r.out = "idle"
			got = append(got, "idle")
		}
		return got
	}
	if r.out == "idle" {
		r.out = "active"
		got = append(got, "active")
	}
	low := MaxWatermark
	for k, w := range r.wm {
		if !r.idle[k] {
			low = min(low, w)
		}
	}
	if low > r.last {
		r.last = low
		got = append(got, fmt.Sprintf("watermark %d", low))
	}
	return got
}

func mapKeys(m map[int]bool) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestMultiplexerAgainstModel runs random histories (splits added and
// removed, watermarks, idleness) through the Multiplexer and the naive
// model and compares every emission. The valve.seed flag reproduces a
// failure.
func TestMultiplexerAgainstModel(t *testing.T) {
	seed := *valveSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, 0x6d75))
	runs := 2000
	if testing.Short() {
		runs = 200
	}
	for run := range runs {
		var r recorder
		m := NewMultiplexer(&r)
		ref := &refMux{wm: map[int]int64{}, idle: map[int]bool{}, last: MinWatermark}
		outs := map[int]*SplitOutput{}
		next := 0
		m.Combine()
		want := ref.step()
		for n := range 60 {
			var desc string
			switch k := rng.IntN(10); {
			case k == 0 || len(outs) == 0:
				outs[next] = m.Add()
				ref.wm[next], ref.idle[next] = MinWatermark, false
				desc = fmt.Sprintf("add %d", next)
				next++
			case k == 1:
				i := anyKey(rng, outs)
				m.Remove(outs[i])
				delete(outs, i)
				delete(ref.wm, i)
				delete(ref.idle, i)
				desc = fmt.Sprintf("remove %d", i)
			case k <= 3:
				i := anyKey(rng, outs)
				outs[i].MarkIdle()
				ref.idle[i] = true
				desc = fmt.Sprintf("idle %d", i)
			case k == 4:
				i := anyKey(rng, outs)
				outs[i].MarkActive()
				ref.idle[i] = false
				desc = fmt.Sprintf("active %d", i)
			default:
				i := anyKey(rng, outs)
				ts := rng.Int64N(100)
				outs[i].EmitWatermark(ts)
				ref.wm[i], ref.idle[i] = max(ref.wm[i], ts), false
				desc = fmt.Sprintf("watermark %d ts=%d", i, ts)
			}
			want = append(want, ref.step()...)
			if got := r.take(); !slices.Equal(got, want) {
				t.Fatalf("run %d step %d (%s): got %v, want %v\nreproduce: go test ./eventtime -run TestMultiplexerAgainstModel -valve.seed=%d", run, n, desc, got, want, seed)
			}
			want = nil
			require.Equal(t, ref.last, m.Watermark())
			require.Equal(t, ref.out == "idle", m.Status() == Idle)
			require.Equal(t, len(ref.wm), m.Splits())
		}
	}
}

func anyKey(rng *rand.Rand, m map[int]*SplitOutput) int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks[rng.IntN(len(ks))]
}

func TestMultiplexerNoAllocations(t *testing.T) {
	m := NewMultiplexer(&countingOutput{})
	outs := []*SplitOutput{m.Add(), m.Add(), m.Add()}
	ts := int64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		ts++
		outs[ts%3].EmitWatermark(ts)
		if ts%7 == 0 {
			outs[ts%3].MarkIdle()
		}
	})
	require.Zero(t, allocs)
}

type countingOutput struct{ n int }

func (c *countingOutput) EmitWatermark(int64) { c.n++ }
func (c *countingOutput) MarkIdle()           { c.n++ }
func (c *countingOutput) MarkActive()         { c.n++ }
