package eventtime

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// refValve is the valve's rules written as plainly as possible: flat
// slices, and the minimum and maximum recomputed by a scan whenever a rule
// needs them. TestValveAgainstModel holds the real Valve to it.
type refValve struct {
	wm            []int64
	idle          []bool
	aligned       []bool
	lastWatermark int64
	lastIdle      bool
}

func newRefValve(n int) *refValve {
	r := &refValve{
		wm:            make([]int64, n),
		idle:          make([]bool, n),
		aligned:       make([]bool, n),
		lastWatermark: math.MinInt64,
	}
	for i := range n {
		r.wm[i] = math.MinInt64
		r.aligned[i] = true
	}
	return r
}

// refEmission is what one step emitted: a watermark (wm, if hasWM, else
// 0), then a status change ("idle", "active"; "" for none).
type refEmission struct {
	wm     int64
	hasWM  bool
	status string
}

func (e refEmission) String() string {
	var out []string
	if e.hasWM {
		out = append(out, fmt.Sprintf("watermark ts=%d", e.wm))
	}
	if e.status != "" {
		out = append(out, e.status)
	}
	return emitted(out)
}

// emitNewMin: the minimum over the aligned channels, if there is one and
// it is above the last emitted watermark.
func (r *refValve) emitNewMin(e *refEmission) {
	found, m := false, int64(0)
	for i := range r.wm {
		if r.aligned[i] && (!found || r.wm[i] < m) {
			found, m = true, r.wm[i]
		}
	}
	if found && m > r.lastWatermark {
		r.lastWatermark = m
		e.wm, e.hasWM = m, true
	}
}

// emitMax: the maximum over every channel, if above the last emitted one.
func (r *refValve) emitMax(e *refEmission) {
	m := r.wm[0]
	for _, w := range r.wm {
		if w > m {
			m = w
		}
	}
	if m > r.lastWatermark {
		r.lastWatermark = m
		e.wm, e.hasWM = m, true
	}
}

func (r *refValve) step(cmd string, c int, ts int64) refEmission {
	var e refEmission
	switch cmd {
	case "watermark":
		if r.lastIdle || r.idle[c] || ts <= r.wm[c] {
			break
		}
		r.wm[c] = ts
		if !r.aligned[c] && ts >= r.lastWatermark {
			r.aligned[c] = true
		}
		r.emitNewMin(&e)
	case "idle":
		if r.idle[c] {
			break
		}
		r.idle[c], r.aligned[c] = true, false
		allIdle := true
		for _, idle := range r.idle {
			allIdle = allIdle && idle
		}
		if allIdle {
			if r.wm[c] == r.lastWatermark {
				r.emitMax(&e)
			}
			r.lastIdle = true
			e.status = "idle"
		} else if r.wm[c] == r.lastWatermark {
			r.emitNewMin(&e)
		}
	case "active":
		if !r.idle[c] {
			break
		}
		r.idle[c] = false
		if r.wm[c] >= r.lastWatermark {
			r.aligned[c] = true
		}
		if r.lastIdle {
			r.lastIdle = false
			e.status = "active"
		}
	}
	return e
}

var (
	valveRuns = flag.Int("valve.runs", 20000, "random histories in TestValveAgainstModel")
	valveSeed = flag.Uint64("valve.seed", 0, "seed of the random valve and generator tests (0: a random one)")
)

// TestValveAgainstModel plays random histories of watermarks and status
// changes on the real Valve and on refValve and demands the same output
// and the same state after every step. A failure prints the history as a
// scenario file and the flags that reproduce it.
func TestValveAgainstModel(t *testing.T) {
	seed := *valveSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, 0x7a1e))
	for run := range *valveRuns {
		if msg := randomValveHistory(rng); msg != "" {
			t.Fatalf("run %d: %s\nreproduce: go test ./eventtime -run TestValveAgainstModel -valve.seed=%d", run, msg, seed)
		}
	}
}

// valveCmd is one event of a random history.
type valveCmd struct {
	cmd string // watermark, idle or active
	ch  int
	ts  int64
}

func (c valveCmd) String() string {
	if c.cmd == "watermark" {
		return fmt.Sprintf("watermark ch=%d ts=%d", c.ch, c.ts)
	}
	return fmt.Sprintf("%s ch=%d", c.cmd, c.ch)
}

// randomValveHistory plays one random history and returns, at the first
// difference, the history so far in the scenario format with what the
// model expected; "" if there was none.
func randomValveHistory(rng *rand.Rand) string {
	n := 1 + rng.IntN(6)
	v, err := NewValve(n)
	if err != nil {
		panic(err)
	}
	r := newRefValve(n)
	var cmds []valveCmd
	// transcript replays the history so far on a fresh valve, in the
	// scenario format.
	transcript := func() string {
		fresh, _ := NewValve(n)
		script := []string{fmt.Sprintf("new channels=%d\n----\nok\n", n)}
		for _, c := range cmds {
			script = append(script, c.String()+"\n----\n"+valveStep(fresh, c.cmd, ChannelIndex(c.ch), c.ts))
		}
		return strings.Join(script, "\n")
	}
	// Timestamps from a small range, so that channels collide with each
	// other and with the output, now and then an extreme. Status churn
	// is frequent in some histories, rare in others.
	lo, hi := int64(rng.IntN(5)-2), int64(3+rng.IntN(25))
	statusOdds := 1 + rng.IntN(8) // of 10
	steps := 1 + rng.IntN(80)
	for range steps {
		c := valveCmd{ch: rng.IntN(n)}
		if rng.IntN(10) >= statusOdds {
			c.cmd = "watermark"
			switch k := rng.IntN(40); k {
			case 0:
				c.ts = math.MinInt64
			case 1:
				c.ts = math.MinInt64 + 1
			case 2:
				c.ts = math.MaxInt64 - 1
			case 3:
				c.ts = math.MaxInt64
			default:
				c.ts = lo + rng.Int64N(hi-lo+1)
			}
		} else {
			c.cmd = "idle"
			if rng.IntN(2) == 0 {
				c.cmd = "active"
			}
		}
		cmds = append(cmds, c)
		var got refEmission
		switch c.cmd {
		case "watermark":
			got.wm, got.hasWM = v.InputWatermark(ChannelIndex(c.ch), c.ts)
		default:
			s := Idle
			if c.cmd == "active" {
				s = Active
			}
			e := v.InputStatus(ChannelIndex(c.ch), s)
			got.wm, got.hasWM = e.Watermark, e.HasWatermark
			if e.StatusChanged {
				got.status = e.Status.String()
			}
		}
		if !got.hasWM {
			got.wm = 0
		}
		if want := r.step(c.cmd, c.ch, c.ts); got != want {
			return fmt.Sprintf("output differs:\n%s\nmodel wants:\n%s", transcript(), want)
		}
		if msg := compareValveState(v, r); msg != "" {
			return fmt.Sprintf("state differs after:\n%s\n%s", transcript(), msg)
		}
	}
	return ""
}

// compareValveState compares everything the Valve exposes with the model,
// and checks the Valve's heap of aligned channels.
func compareValveState(v *Valve, r *refValve) string {
	if v.Watermark() != r.lastWatermark {
		return fmt.Sprintf("Watermark() = %d, model %d", v.Watermark(), r.lastWatermark)
	}
	if want := statusOf(r.lastIdle); v.Status() != want {
		return fmt.Sprintf("Status() = %v, model %v", v.Status(), want)
	}
	for i := range r.wm {
		got := v.Channel(ChannelIndex(i))
		want := ChannelState{Watermark: r.wm[i], Status: statusOf(r.idle[i]), Aligned: r.aligned[i]}
		if got != want {
			return fmt.Sprintf("Channel(%d) = %+v, model %+v", i, got, want)
		}
	}
	return checkValveHeap(v)
}

func statusOf(idle bool) Status {
	if idle {
		return Idle
	}
	return Active
}

// checkValveHeap checks the invariants of the Valve's internal state: the
// heap holds exactly the aligned channels, each one's pos is its index,
// every parent is at most its children, and the count of active channels
// is right.
func checkValveHeap(v *Valve) string {
	for i, e := range v.heap {
		if c := v.in[e.ch]; c.pos != int32(i) || c.wm != e.wm {
			return fmt.Sprintf("heap[%d] = %+v, but channel %d has pos %d, wm %d", i, e, e.ch, c.pos, c.wm)
		}
		if i > 0 && v.heap[(i-1)/2].wm > e.wm {
			return fmt.Sprintf("heap[%d] = %+v is below its parent", i, e)
		}
	}
	inHeap, active := 0, 0
	for ch := range v.in {
		c := v.in[ch]
		if c.pos >= 0 {
			inHeap++
			if c.idle {
				return fmt.Sprintf("idle channel %d is aligned", ch)
			}
		}
		if !c.idle {
			active++
		}
	}
	if inHeap != len(v.heap) {
		return fmt.Sprintf("%d channels have a heap position, the heap holds %d", inHeap, len(v.heap))
	}
	if active != v.active {
		return fmt.Sprintf("%d channels are active, the valve counts %d", active, v.active)
	}
	return ""
}
