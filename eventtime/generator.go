package eventtime

import (
	"fmt"
	"time"
)

// Output receives what a Generator decides: watermarks and status changes
// for one stream (Flink's WatermarkOutput). The source task implements
// it, usually behind a DedupOutput, and turns the calls into watermark and
// status events on its output channels.
type Output interface {
	// EmitWatermark says that no record with a timestamp at or below wm
	// will follow.
	EmitWatermark(wm int64)
	// MarkIdle says that the stream carries no records for now.
	MarkIdle()
	// MarkActive says that the stream carries records again.
	MarkActive()
}

// Generator makes a stream's watermarks from the timestamps of its records
// (Flink's WatermarkGenerator). The source task calls it from its one
// goroutine: OnEvent for every record, OnPeriodicEmit at a fixed interval
// (the auto-watermark interval). Either may write to out. A Generator must
// not read the wall clock itself; one that needs time is given a clock.
type Generator interface {
	// OnEvent sees the event timestamp ts of one record (NoTimestamp if
	// it has none). A punctuated generator emits from here.
	OnEvent(ts int64, out Output)
	// OnPeriodicEmit is called periodically; a periodic generator emits
	// its current watermark from here.
	OnPeriodicEmit(out Output)
}

// BoundedOutOfOrderness is a periodic Generator for streams whose records
// arrive at most a fixed bound later than the highest timestamp seen
// before them: its watermark is that highest timestamp minus the bound
// minus 1, so a record exactly bound behind the highest is still on time.
// Before the first record it emits nothing, and it emits a watermark only
// when it is above the last one it emitted.
type BoundedOutOfOrderness struct {
	bound int64 // milliseconds, >= 0
	// highest is the highest timestamp seen, initially MinWatermark +
	// bound + 1: highest - bound - 1 is then MinWatermark at worst, and
	// never underflows.
	highest int64
	emitted int64 // the last watermark emitted, MinWatermark at first
}

var _ Generator = (*BoundedOutOfOrderness)(nil)

// NewBoundedOutOfOrderness returns a generator that tolerates records up
// to bound late. The bound is truncated to whole milliseconds. It returns
// an error wrapping ErrInvalidArgument if bound is negative.
func NewBoundedOutOfOrderness(bound time.Duration) (*BoundedOutOfOrderness, error) {
	if bound < 0 {
		return nil, fmt.Errorf("%w: out-of-orderness bound %v is negative", ErrInvalidArgument, bound)
	}
	return newBounded(bound.Milliseconds()), nil
}

// NewMonotonousTimestamps returns a generator for streams whose timestamps
// never decrease: a BoundedOutOfOrderness with bound 0, whose watermark
// trails the highest timestamp by 1 ms.
func NewMonotonousTimestamps() *BoundedOutOfOrderness { return newBounded(0) }

func newBounded(boundMillis int64) *BoundedOutOfOrderness {
	// bound <= MaxInt64, so MinInt64 + bound + 1 <= 0: no overflow.
	return &BoundedOutOfOrderness{
		bound:   boundMillis,
		highest: MinWatermark + boundMillis + 1,
		emitted: MinWatermark,
	}
}

// OnEvent records ts if it is the highest timestamp so far. It emits
// nothing.
func (g *BoundedOutOfOrderness) OnEvent(ts int64, _ Output) {
	if ts > g.highest {
		g.highest = ts
	}
}

// OnPeriodicEmit emits the current watermark if it rose since the last
// emission.
func (g *BoundedOutOfOrderness) OnPeriodicEmit(out Output) {
	if wm := g.highest - g.bound - 1; wm > g.emitted {
		g.emitted = wm
		out.EmitWatermark(wm)
	}
}

// Idleness wraps a Generator and marks its stream idle when no record has
// come for a while (Flink's WatermarksWithIdleness), so that downstream
// valves stop waiting for it.
//
// It checks at each periodic emit, and reads the clock only then, never
// per record. The first periodic emit that finds no record since the one
// before starts a quiet period; a later periodic emit that finds none
// either, more than the timeout after the quiet period began, marks the
// output idle (once). A stream is therefore marked idle between the
// timeout and the timeout plus two periodic intervals after its last
// record. While idle, the wrapped generator's periodic emits are skipped.
// The next record marks the output active again, before the wrapped
// generator sees it.
type Idleness struct {
	inner   Generator
	now     func() time.Time
	timeout time.Duration

	events     uint64 // records seen (wraps harmlessly)
	checked    uint64 // events at the last periodic emit
	quiet      bool   // quietSince is set: no record since it
	quietSince time.Time
	idle       bool // the output is marked idle
}

var _ Generator = (*Idleness)(nil)

// NewIdleness wraps inner with idleness detection after timeout, reading
// the time from now (a clock's Now method, such as time.Now in production
// or a manual clock's in tests). It returns an error wrapping
// ErrInvalidArgument if inner or now is nil or timeout is not positive.
func NewIdleness(inner Generator, timeout time.Duration, now func() time.Time) (*Idleness, error) {
	switch {
	case inner == nil:
		return nil, fmt.Errorf("%w: idleness needs a generator to wrap", ErrInvalidArgument)
	case now == nil:
		return nil, fmt.Errorf("%w: idleness needs a clock", ErrInvalidArgument)
	case timeout <= 0:
		return nil, fmt.Errorf("%w: idle timeout %v is not positive", ErrInvalidArgument, timeout)
	}
	return &Idleness{inner: inner, now: now, timeout: timeout}, nil
}

// OnEvent marks the output active if it was idle, counts the record, and
// hands it to the wrapped generator.
func (w *Idleness) OnEvent(ts int64, out Output) {
	if w.idle {
		w.idle = false
		out.MarkActive()
	}
	w.events++
	w.inner.OnEvent(ts, out)
}

// OnPeriodicEmit marks the output idle if the stream has been quiet for
// longer than the timeout; otherwise it lets the wrapped generator emit.
func (w *Idleness) OnPeriodicEmit(out Output) {
	if !w.quietTooLong() {
		w.inner.OnPeriodicEmit(out)
		return
	}
	if !w.idle {
		w.idle = true
		out.MarkIdle()
	}
}

// Idle reports whether the output is currently marked idle.
func (w *Idleness) Idle() bool { return w.idle }

// Quiet returns how long the stream has been quiet as of now, by the
// clock: 0 unless a quiet period began at an earlier periodic emit and no
// record came since. A caller of several streams' periodic emits calls
// the quietest first, so that streams turn idle in the order their
// timeouts ran out even when one late emit finds several run out (see
// weir's split sources).
func (w *Idleness) Quiet() time.Duration {
	if !w.quiet || w.events != w.checked {
		return 0
	}
	return w.now().Sub(w.quietSince)
}

func (w *Idleness) quietTooLong() bool {
	if w.events != w.checked {
		w.checked = w.events
		w.quiet = false
		return false
	}
	now := w.now()
	if !w.quiet {
		w.quiet, w.quietSince = true, now
		return false
	}
	return now.Sub(w.quietSince) > w.timeout
}

// DedupOutput is an Output that passes on to another Output only what
// changes something: watermarks above the last one it passed on, and
// status changes. A watermark that arrives while it is idle marks it
// active first, since downstream valves ignore the watermarks of an idle
// channel. Generators may thus repeat themselves; what reaches the stream
// is strictly increasing.
type DedupOutput struct {
	next Output
	last int64
	idle bool
}

var _ Output = (*DedupOutput)(nil)

// NewDedupOutput returns a DedupOutput in front of next, active, with no
// watermark passed on yet. It panics if next is nil.
func NewDedupOutput(next Output) *DedupOutput {
	if next == nil {
		panic("eventtime: NewDedupOutput(nil)")
	}
	return &DedupOutput{next: next, last: MinWatermark}
}

// EmitWatermark passes wm on if it is above the last watermark passed on,
// marking the output active first if it was idle.
func (d *DedupOutput) EmitWatermark(wm int64) {
	if wm <= d.last {
		return
	}
	d.last = wm
	if d.idle {
		d.idle = false
		d.next.MarkActive()
	}
	d.next.EmitWatermark(wm)
}

// MarkIdle passes the status on unless the output is idle already.
func (d *DedupOutput) MarkIdle() {
	if !d.idle {
		d.idle = true
		d.next.MarkIdle()
	}
}

// MarkActive passes the status on unless the output is active already.
func (d *DedupOutput) MarkActive() {
	if d.idle {
		d.idle = false
		d.next.MarkActive()
	}
}

// Watermark returns the last watermark passed on, MinWatermark if none.
func (d *DedupOutput) Watermark() int64 { return d.last }

// Status returns the status of the output as passed on.
func (d *DedupOutput) Status() Status {
	if d.idle {
		return Idle
	}
	return Active
}
