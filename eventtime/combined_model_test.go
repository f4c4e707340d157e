package eventtime

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// refCombined is the combination of a task's inputs written as
// docs/join-scenarios.md (op=watermarks) states it: a refValve per input,
// each input's watermark and idle flag, and the combined watermark
// recomputed by a scan. TestCombinedValveAgainstModel holds the real
// CombinedValve to it.
type refCombined struct {
	valves    []*refValve
	wm        []int64
	idle      []bool
	combined  int64
	allIdle   bool
	announced string // "active" or "idle"
}

func newRefCombined(channels []int) *refCombined {
	r := &refCombined{combined: math.MinInt64, announced: "active"}
	for _, n := range channels {
		r.valves = append(r.valves, newRefValve(n))
		r.wm = append(r.wm, math.MinInt64)
		r.idle = append(r.idle, false)
	}
	return r
}

// recompute returns whether the combined watermark rose.
func (r *refCombined) recompute() bool {
	all := true
	for _, idle := range r.idle {
		all = all && idle
	}
	if all {
		r.allIdle = true
		return false
	}
	r.allIdle = false
	m, found := int64(0), false
	for i, w := range r.wm {
		if !r.idle[i] && (!found || w < m) {
			m, found = w, true
		}
	}
	if m > r.combined {
		r.combined = m
		return true
	}
	return false
}

// step hands one event to input in's valve and the valve's output to the
// combination; it returns the lines the task printed.
func (r *refCombined) step(cmd string, in, ch int, ts int64) []string {
	var out []string
	forward := func() {
		if r.announced != "idle" {
			out = append(out, fmt.Sprintf("watermark ts=%d", r.combined))
		}
	}
	e := r.valves[in].step(cmd, ch, ts)
	if e.hasWM {
		r.wm[in] = max(r.wm[in], e.wm)
		r.idle[in] = false
		if r.recompute() {
			forward()
		}
	}
	if e.status != "" {
		was := r.allIdle
		r.idle[in] = e.status == "idle"
		if r.recompute() {
			forward()
		}
		if r.allIdle != was {
			r.announced = "active"
			if r.allIdle {
				r.announced = "idle"
			}
			out = append(out, "status "+r.announced)
		}
	}
	return out
}

var combinedRuns = flag.Int("combined.runs", 5000, "random histories in TestCombinedValveAgainstModel")

// TestCombinedValveAgainstModel plays random histories of watermarks and
// status changes over several inputs on the real CombinedValve and on
// refCombined, and demands the same output and watermarks after every
// step. A failure prints the history as an op=watermarks scenario and the
// flags that reproduce it.
func TestCombinedValveAgainstModel(t *testing.T) {
	seed := *valveSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, 0xc0b1))
	for run := range *combinedRuns {
		if msg := randomCombinedHistory(rng); msg != "" {
			t.Fatalf("run %d: %s\nreproduce: go test ./eventtime -run TestCombinedValveAgainstModel -valve.seed=%d", run, msg, seed)
		}
	}
}

func randomCombinedHistory(rng *rand.Rand) string {
	inputs := 1 + rng.IntN(4)
	channels := make([]int, inputs)
	for i := range channels {
		channels[i] = 1 + rng.IntN(3)
	}
	v, err := NewCombinedValve(channels)
	if err != nil {
		panic(err)
	}
	r := newRefCombined(channels)
	counts := make([]string, inputs)
	for i, n := range channels {
		counts[i] = fmt.Sprint(n)
	}
	script := []string{fmt.Sprintf("new op=watermarks inputs=%d channels=%s\n----\nok\n", inputs, strings.Join(counts, ","))}
	lo, hi := int64(rng.IntN(5)-2), int64(3+rng.IntN(25))
	statusOdds := 1 + rng.IntN(8)
	for range 1 + rng.IntN(100) {
		in := rng.IntN(inputs)
		ch := rng.IntN(channels[in])
		var cmd, line string
		var ts int64
		var e CombinedEmission
		if rng.IntN(10) >= statusOdds {
			cmd = "watermark"
			switch k := rng.IntN(40); k {
			case 0:
				ts = math.MinInt64
			case 1:
				ts = math.MaxInt64
			default:
				ts = lo + rng.Int64N(hi-lo+1)
			}
			line = fmt.Sprintf("watermark input=%d channel=%d ts=%d", in+1, ch, ts)
			e = v.ProcessWatermark(in, ChannelIndex(ch), ts)
		} else {
			st := Idle
			cmd = "idle"
			if rng.IntN(2) == 0 {
				cmd, st = "active", Active
			}
			line = fmt.Sprintf("status input=%d channel=%d %s", in+1, ch, cmd)
			e = v.ProcessStatus(in, ChannelIndex(ch), st)
		}
		var got []string
		if e.Forward {
			for _, wm := range e.Watermarks[:e.Count] {
				got = append(got, fmt.Sprintf("watermark ts=%d", wm))
			}
		}
		if e.StatusChanged {
			got = append(got, "status "+e.Status.String())
		}
		want := r.step(cmd, in, ch, ts)
		script = append(script, line+"\n----\n"+emitted(want))
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			return fmt.Sprintf("output differs at the last command (got %q):\n%s", got, strings.Join(script, "\n"))
		}
		if v.Watermark() != r.combined {
			return fmt.Sprintf("Watermark() = %d, model %d after:\n%s", v.Watermark(), r.combined, strings.Join(script, "\n"))
		}
		for i := range channels {
			if v.InputWatermark(i) != r.wm[i] {
				return fmt.Sprintf("InputWatermark(%d) = %d, model %d after:\n%s", i, v.InputWatermark(i), r.wm[i], strings.Join(script, "\n"))
			}
		}
	}
	return ""
}
