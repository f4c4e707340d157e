package eventtime

import (
	"fmt"
	"math"
)

// CombinedValve combines the watermarks and statuses of a task's inputs
// into the one event time of its operator: a Valve per input combines
// that input's channels, and the operator's watermark is the minimum of
// the inputs' watermarks over the inputs that are not idle, rising only;
// the task is idle when every input is, and active again as soon as one
// is. It is the port of Flink's per-input StatusWatermarkValve feeding
// AbstractStreamOperator's IndexedCombinedWatermarkStatus, and of the
// output's rule that a watermark is not forwarded while the task
// announced idle; docs/join-scenarios.md (op=watermarks) gives the rules.
// A task with one input has one valve, and its output is that valve's.
//
// A CombinedValve is a pure state machine like Valve: no goroutines,
// clocks or I/O, no allocation after NewCombinedValve. Its methods panic
// if an input or channel index is out of range, which is a bug in the
// caller.
type CombinedValve struct {
	valves []*Valve
	wm     []int64 // each input's watermark: its valve's output, rising
	idle   []bool  // each input's status: its valve's output
	active int     // inputs not idle

	combined  int64 // the operator's watermark
	allIdle   bool
	announced Status // the status the task last forwarded
}

// CombinedEmission is what a CombinedValve hands the task after one
// event: at most two watermarks, then at most one status change, in that
// order. Two watermarks come when the last active channel of an input
// turns idle: its valve's flush raises the combined watermark, and the
// input turning idle may raise it again.
type CombinedEmission struct {
	// Watermarks holds the operator's new watermarks, rising: the first
	// Count are valid. The operator's event time moves to each in turn
	// (its timers fire).
	Watermarks [2]int64
	Count      int
	// Forward reports that the watermarks also go downstream: false
	// while the task announced idle (Flink's output drops watermarks
	// then).
	Forward bool
	// StatusChanged reports that the task's status changed to Status:
	// forward it after the watermark, if any.
	StatusChanged bool
	Status        Status
}

// NewCombinedValve returns a valve over len(channels) inputs, input i
// with channels[i] channels, every input active at MinWatermark. It
// returns an error wrapping ErrInvalidArgument without an input or with an
// input without channels.
func NewCombinedValve(channels []int) (*CombinedValve, error) {
	if len(channels) < 1 || len(channels) > math.MaxInt32 {
		return nil, fmt.Errorf("%w: a combined valve needs at least one input, not %d", ErrInvalidArgument, len(channels))
	}
	c := &CombinedValve{valves: make([]*Valve, len(channels)), wm: make([]int64, len(channels)),
		idle: make([]bool, len(channels)), active: len(channels), combined: MinWatermark}
	for i, n := range channels {
		v, err := NewValve(n)
		if err != nil {
			return nil, fmt.Errorf("input %d: %w", i, err)
		}
		c.valves[i] = v
		c.wm[i] = MinWatermark
	}
	return c, nil
}

// Inputs is the number of inputs.
func (c *CombinedValve) Inputs() int { return len(c.valves) }

// Input returns input i's valve, for its state (metrics); do not hand it
// events directly.
func (c *CombinedValve) Input(i int) *Valve { return c.valves[i] }

// InputWatermark returns input i's watermark: the last its valve emitted
// (MinWatermark if none).
func (c *CombinedValve) InputWatermark(i int) int64 { return c.wm[i] }

// Watermark returns the operator's combined watermark (MinWatermark if
// none yet).
func (c *CombinedValve) Watermark() int64 { return c.combined }

// Status returns the status the task last forwarded.
func (c *CombinedValve) Status() Status { return c.announced }

// ProcessWatermark hands the valve a watermark of timestamp ts that
// arrived on channel ch of input i.
func (c *CombinedValve) ProcessWatermark(i int, ch ChannelIndex, ts int64) CombinedEmission {
	v := c.valve(i)
	var e CombinedEmission
	if wm, ok := v.InputWatermark(ch, ts); ok {
		c.inputWatermark(i, wm, &e)
	}
	e.Status = c.announced
	return e
}

// ProcessStatus hands the valve a watermark status s that arrived on
// channel ch of input i. It panics if s is neither Active nor Idle.
func (c *CombinedValve) ProcessStatus(i int, ch ChannelIndex, s Status) CombinedEmission {
	v := c.valve(i)
	ve := v.InputStatus(ch, s)
	var e CombinedEmission
	if ve.HasWatermark {
		c.inputWatermark(i, ve.Watermark, &e)
	}
	if ve.StatusChanged {
		was := c.allIdle
		if idle := ve.Status == Idle; idle != c.idle[i] {
			c.idle[i] = idle
			if idle {
				c.active--
			} else {
				c.active++
			}
		}
		c.recompute(&e)
		if c.allIdle != was {
			c.announced = Active
			if c.allIdle {
				c.announced = Idle
			}
			e.StatusChanged = true
		}
	}
	e.Status = c.announced
	return e
}

// inputWatermark takes input i's valve output wm.
func (c *CombinedValve) inputWatermark(i int, wm int64, e *CombinedEmission) {
	c.wm[i] = max(c.wm[i], wm)
	if c.idle[i] {
		// A valve emits watermarks only while active; keep the flags
		// consistent all the same.
		c.idle[i] = false
		c.active++
	}
	c.recompute(e)
}

// recompute updates allIdle and raises the combined watermark to the
// minimum over the inputs not idle; a rise goes into e.
func (c *CombinedValve) recompute(e *CombinedEmission) {
	if c.active == 0 {
		c.allIdle = true
		return
	}
	c.allIdle = false
	m := MaxWatermark
	for i, w := range c.wm {
		if !c.idle[i] {
			m = min(m, w)
		}
	}
	if m > c.combined {
		c.combined = m
		e.Watermarks[e.Count] = m
		e.Count++
		e.Forward = c.announced != Idle
	}
}

func (c *CombinedValve) valve(i int) *Valve {
	if uint(i) >= uint(len(c.valves)) {
		panic(fmt.Sprintf("eventtime: combined valve input %d outside 0..%d", i, len(c.valves)-1))
	}
	return c.valves[i]
}
