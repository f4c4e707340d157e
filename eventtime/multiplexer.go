package eventtime

import "fmt"

// Multiplexer combines the watermarks of a source subtask's splits (Kafka
// partitions, shards, files) into the subtask's own (Flink's
// WatermarkOutputMultiplexer). Each split gets its own Output (a
// SplitOutput, written by the split's Generator); the Multiplexer passes
// on to the subtask's Output:
//
//   - the minimum watermark over the splits that are active, whenever it
//     rises: a split that is behind holds the subtask back, so records of
//     one partition are not late because another ran ahead;
//   - Idle when every split is idle, or when there is no split at all (a
//     subtask with no partition assigned), so that downstream operators do
//     not wait for a subtask that has nothing to read;
//   - Active when some split turns active again, before any watermark.
//
// A new split is active with no watermark: from then on the combined
// watermark waits for it (it never goes back). A removed split (finished)
// no longer counts.
//
// Like the Valve it is a pure state machine, driven from one goroutine:
// no clock, no allocation per watermark. Every change of a split is
// combined immediately.
type Multiplexer struct {
	next   Output
	splits []*SplitOutput
	// What was passed on: the last watermark and the status.
	wm   int64
	idle bool
}

// SplitOutput is the Output of one split of a Multiplexer.
type SplitOutput struct {
	m    *Multiplexer
	wm   int64 // the highest watermark the split emitted
	idle bool
	gone bool // removed
}

var _ Output = (*SplitOutput)(nil)

// NewMultiplexer returns a Multiplexer writing to next, with no split yet,
// active, and no watermark passed on. It panics if next is nil. Call
// Combine once the initial splits are added.
func NewMultiplexer(next Output) *Multiplexer {
	if next == nil {
		panic("eventtime: NewMultiplexer(nil)")
	}
	return &Multiplexer{next: next, wm: MinWatermark}
}

// Add registers a new split, active and without a watermark, and returns
// its Output. The combined status turns active if it was idle.
func (m *Multiplexer) Add() *SplitOutput {
	s := &SplitOutput{m: m, wm: MinWatermark}
	m.splits = append(m.splits, s)
	m.Combine()
	return s
}

// Remove unregisters a split: its watermark and status no longer count,
// and what it emits from now on is ignored. Removing a split that is not
// registered is a bug: it panics.
func (m *Multiplexer) Remove(s *SplitOutput) {
	for i, x := range m.splits {
		if x == s {
			m.splits = append(m.splits[:i], m.splits[i+1:]...)
			s.gone = true
			m.Combine()
			return
		}
	}
	panic(fmt.Sprintf("eventtime: Multiplexer.Remove of a split that is not registered (%d registered)", len(m.splits)))
}

// Combine recomputes the combined watermark and status and passes on what
// changed. Every change of a split calls it; call it yourself once after
// adding the initial splits, so that a subtask without any split is
// marked idle.
func (m *Multiplexer) Combine() {
	low, active := MaxWatermark, false
	for _, s := range m.splits {
		if !s.idle {
			active = true
			low = min(low, s.wm)
		}
	}
	if !active {
		if !m.idle {
			m.idle = true
			m.next.MarkIdle()
		}
		return
	}
	if m.idle {
		m.idle = false
		m.next.MarkActive()
	}
	if low > m.wm {
		m.wm = low
		m.next.EmitWatermark(low)
	}
}

// Splits returns the number of registered splits.
func (m *Multiplexer) Splits() int { return len(m.splits) }

// Watermark returns the last combined watermark passed on (MinWatermark if
// none).
func (m *Multiplexer) Watermark() int64 { return m.wm }

// Status returns the combined status as passed on.
func (m *Multiplexer) Status() Status {
	if m.idle {
		return Idle
	}
	return Active
}

// EmitWatermark raises the split's watermark to wm (a lower one is
// ignored) and marks it active.
func (s *SplitOutput) EmitWatermark(wm int64) {
	if s.gone || (wm <= s.wm && !s.idle) {
		return
	}
	s.wm = max(s.wm, wm)
	s.idle = false
	s.m.Combine()
}

// MarkIdle marks the split idle: the combined watermark no longer waits
// for it.
func (s *SplitOutput) MarkIdle() {
	if s.gone || s.idle {
		return
	}
	s.idle = true
	s.m.Combine()
}

// MarkActive marks the split active again.
func (s *SplitOutput) MarkActive() {
	if s.gone || !s.idle {
		return
	}
	s.idle = false
	s.m.Combine()
}

// Watermark returns the split's watermark (MinWatermark if none).
func (s *SplitOutput) Watermark() int64 { return s.wm }

// Idle reports whether the split is marked idle.
func (s *SplitOutput) Idle() bool { return s.idle }
