package eventtime

import (
	"fmt"
	"math"
)

// Valve combines the watermarks and watermark statuses arriving on a
// task's input channels into the one watermark and status the task
// forwards: the minimum over the channels that count, only when it rises,
// and idle only when every channel is idle. It is the port of Flink's
// StatusWatermarkValve, with one subpartition per channel; the package
// documentation gives the caller's duties, and docs/watermark-scenarios.md
// the rules.
//
// A Valve is a pure state machine: no goroutines, clocks or I/O, and no
// allocation after NewValve. It is not safe for concurrent use; the task's
// goroutine owns it. Its methods panic if a channel index is outside
// 0..Channels()-1, which is a bug in the caller.
type Valve struct {
	in []input
	// heap holds the aligned channels, a binary min-heap ordered by their
	// watermark, so the minimum over the aligned channels is heap[0].wm.
	// Its capacity is the number of channels: pushes never allocate.
	heap   []entry
	active int   // channels whose status is Active
	out    int64 // the last watermark emitted (MinWatermark at first)
	status Status
}

// entry is an aligned channel in Valve.heap, with a copy of its watermark
// so that the heap's comparisons stay within the heap.
type entry struct {
	wm int64
	ch int32
}

// input is the valve's state of one input channel.
type input struct {
	wm   int64 // the highest watermark accepted from the channel
	pos  int32 // its index in Valve.heap while aligned, -1 otherwise
	idle bool
}

// ChannelState is what a Valve knows about one input channel (for metrics,
// such as a channel's current input watermark).
type ChannelState struct {
	// Watermark is the highest watermark the valve accepted from the
	// channel; MinWatermark if none yet. It is kept while the channel is
	// idle.
	Watermark int64
	// Status is the last status the channel reported (Active at first).
	Status Status
	// Aligned reports whether the channel counts towards the combined
	// watermark. An idle channel never does; a channel that turned active
	// behind the valve's output does not until its watermark catches up.
	Aligned bool
}

// Emission is what a Valve forwards downstream after a status change on
// one of its channels: at most one watermark, then at most one status
// change, in that order.
type Emission struct {
	// Watermark is the combined watermark to forward; valid only when
	// HasWatermark is set.
	Watermark    int64
	HasWatermark bool
	// StatusChanged reports that the valve's output status changed to
	// Status; forward the new status after the watermark, if any.
	StatusChanged bool
	// Status is the valve's output status after the call, changed or not.
	Status Status
}

// NewValve returns a valve over the given number of input channels,
// numbered 0..channels-1, each active, aligned and without a watermark;
// the valve's output is active, at MinWatermark. It returns an error
// wrapping ErrInvalidArgument if channels < 1 or does not fit an int32.
func NewValve(channels int) (*Valve, error) {
	if channels < 1 || channels > math.MaxInt32 {
		return nil, fmt.Errorf("%w: a valve needs 1..%d input channels, not %d",
			ErrInvalidArgument, math.MaxInt32, channels)
	}
	v := &Valve{
		in:     make([]input, channels),
		heap:   make([]entry, channels),
		active: channels,
		out:    MinWatermark,
	}
	// Every channel starts aligned at MinWatermark: any order is a heap.
	for i := range v.in {
		v.in[i] = input{wm: MinWatermark, pos: int32(i)}
		v.heap[i] = entry{wm: MinWatermark, ch: int32(i)}
	}
	return v, nil
}

// Channels returns the number of input channels.
func (v *Valve) Channels() int { return len(v.in) }

// Watermark returns the last watermark the valve emitted, MinWatermark if
// none yet: the task's current combined input watermark.
func (v *Valve) Watermark() int64 { return v.out }

// Status returns the valve's output status: Idle exactly when every input
// channel is idle.
func (v *Valve) Status() Status { return v.status }

// Channel returns the valve's state of input channel ch.
func (v *Valve) Channel(ch ChannelIndex) ChannelState {
	c := v.input(ch)
	s := ChannelState{Watermark: c.wm, Aligned: c.pos >= 0}
	if c.idle {
		s.Status = Idle
	}
	return s
}

// InputWatermark hands the valve a watermark of timestamp ts that arrived
// on channel ch. If the combined watermark rises because of it, it returns
// the new combined watermark and true: the task fires its event-time work
// up to wm and forwards wm. Otherwise it returns false and nothing goes
// downstream.
//
// The watermark is ignored (not even remembered) while ch or the whole
// valve is idle, and when it is not above the channel's last one.
func (v *Valve) InputWatermark(ch ChannelIndex, ts int64) (wm int64, ok bool) {
	c := v.input(ch)
	if c.idle || ts <= c.wm {
		// An idle valve has only idle channels, so c.idle covers it.
		return 0, false
	}
	c.wm = ts
	if c.pos >= 0 {
		v.heap[c.pos].wm = ts
		v.down(c.pos) // its key grew
	} else if ts >= v.out {
		v.align(ch) // a resumed channel caught up with the output
	}
	return v.emitMin()
}

// InputStatus hands the valve a watermark status s that arrived on channel
// ch, and returns what to forward downstream: the task forwards
// e.Watermark first (if e.HasWatermark, firing its event-time work up to
// it as for InputWatermark), then e.Status (if e.StatusChanged).
//
// A channel turning idle stops counting towards the combined watermark,
// which may then rise; when it was the last active channel, the valve
// flushes the highest watermark of any channel (if that channel was at
// the valve's output watermark) and turns idle. A channel turning active
// counts again once its watermark is at or above the output watermark;
// the first one to turn active turns the valve active. A status equal to
// the channel's current one changes nothing.
//
// InputStatus panics if s is neither Active nor Idle.
func (v *Valve) InputStatus(ch ChannelIndex, s Status) Emission {
	c := v.input(ch)
	var e Emission
	switch s {
	case Idle:
		if c.idle {
			break
		}
		c.idle = true
		v.active--
		if c.pos >= 0 {
			v.unalign(ch)
		}
		if v.active == 0 {
			if c.wm == v.out {
				e.Watermark, e.HasWatermark = v.emitMax()
			}
			v.status = Idle
			e.StatusChanged = true
		} else if c.wm == v.out {
			e.Watermark, e.HasWatermark = v.emitMin()
		}
	case Active:
		if !c.idle {
			break
		}
		c.idle = false
		v.active++
		if c.wm >= v.out {
			v.align(ch)
		}
		if v.status == Idle {
			v.status = Active
			e.StatusChanged = true
		}
	default:
		panic(fmt.Sprintf("eventtime: valve channel %d reported invalid status %d", ch, uint8(s)))
	}
	e.Status = v.status
	return e
}

// input returns channel ch's state, or panics if there is no channel ch.
func (v *Valve) input(ch ChannelIndex) *input {
	if uint(ch) >= uint(len(v.in)) {
		badChannel(ch, len(v.in))
	}
	return &v.in[ch]
}

func badChannel(ch ChannelIndex, n int) {
	panic(fmt.Sprintf("eventtime: valve channel %d outside 0..%d", ch, n-1))
}

// emitMin emits the minimum watermark over the aligned channels if it is
// above the last emitted one. Without an aligned channel it emits nothing.
func (v *Valve) emitMin() (int64, bool) {
	if len(v.heap) == 0 {
		return 0, false
	}
	if m := v.heap[0].wm; m > v.out {
		v.out = m
		return m, true
	}
	return 0, false
}

// emitMax emits the maximum watermark over all channels, whatever their
// status or alignment, if it is above the last emitted one. It runs only
// when the last active channel turns idle, so its scan is off the hot path.
func (v *Valve) emitMax() (int64, bool) {
	m := MinWatermark
	for i := range v.in {
		m = max(m, v.in[i].wm)
	}
	if m > v.out {
		v.out = m
		return m, true
	}
	return 0, false
}

// align adds channel ch to the heap of aligned channels.
func (v *Valve) align(ch ChannelIndex) {
	i := int32(len(v.heap))
	v.heap = append(v.heap, entry{wm: v.in[ch].wm, ch: int32(ch)})
	v.in[ch].pos = i
	v.up(i)
}

// unalign removes channel ch from the heap of aligned channels.
func (v *Valve) unalign(ch ChannelIndex) {
	i := v.in[ch].pos
	last := int32(len(v.heap) - 1)
	v.in[ch].pos = -1
	if i != last {
		// The last entry fills the hole, then finds its place.
		v.heap[i] = v.heap[last]
		v.in[v.heap[i].ch].pos = i
	}
	v.heap = v.heap[:last]
	if i != last && !v.down(i) {
		v.up(i)
	}
}

// up moves the entry at i towards the root while its parent is larger.
func (v *Valve) up(i int32) {
	h := v.heap
	e := h[i]
	for i > 0 {
		p := (i - 1) / 2
		if h[p].wm <= e.wm {
			break
		}
		h[i] = h[p]
		v.in[h[i].ch].pos = i
		i = p
	}
	h[i] = e
	v.in[e.ch].pos = i
}

// down moves the entry at i towards the leaves while a child is smaller,
// and reports whether it moved.
func (v *Valve) down(i int32) bool {
	h := v.heap
	n := int32(len(h))
	e := h[i]
	start := i
	for {
		l := 2*i + 1
		if l >= n || l < 0 { // l < 0: int32 overflow
			break
		}
		j := l
		if r := l + 1; r < n && h[r].wm < h[l].wm {
			j = r
		}
		if h[j].wm >= e.wm {
			break
		}
		h[i] = h[j]
		v.in[h[i].ch].pos = i
		i = j
	}
	h[i] = e
	v.in[e.ch].pos = i
	return i > start
}
