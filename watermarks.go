package weir

import (
	"errors"
	"fmt"
	"time"

	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/task"
)

// WatermarkStrategy says how the values of a stream get their event
// timestamps (unix milliseconds, or any int64 time in ms) and how
// watermarks follow them: a watermark T promises that no value with a
// timestamp at or below T comes after it, so event-time windows and timers
// up to T can fire. Build one with BoundedOutOfOrderness,
// MonotonousTimestamps or CustomWatermarks, and apply it with
// AssignTimestamps.
type WatermarkStrategy[T any] struct {
	timestamp    func(v T) int64
	newGenerator func() (eventtime.Generator, error)
	idleness     time.Duration
	err          error
}

// BoundedOutOfOrderness is the strategy for values that arrive out of
// order by at most bound: the watermark trails the highest timestamp seen
// by bound (watermark = max timestamp − bound − 1, as in Flink). timestamp
// extracts a value's event time.
func BoundedOutOfOrderness[T any](bound time.Duration, timestamp func(v T) int64) *WatermarkStrategy[T] {
	s := &WatermarkStrategy[T]{timestamp: timestamp}
	if bound < 0 {
		s.err = fmt.Errorf("out-of-orderness bound %v must not be negative", bound)
	}
	s.newGenerator = func() (eventtime.Generator, error) { return eventtime.NewBoundedOutOfOrderness(bound) }
	return s
}

// MonotonousTimestamps is the strategy for values whose timestamps never
// decrease within a source subtask: the watermark follows the highest
// timestamp seen (minus one).
func MonotonousTimestamps[T any](timestamp func(v T) int64) *WatermarkStrategy[T] {
	return &WatermarkStrategy[T]{timestamp: timestamp,
		newGenerator: func() (eventtime.Generator, error) { return eventtime.NewMonotonousTimestamps(), nil }}
}

// CustomWatermarks is a strategy with a watermark generator of your own:
// newGenerator makes one per subtask (and again after a restart). A
// generator may emit watermarks on events or on the periodic emission
// (every WithAutoWatermarkInterval).
func CustomWatermarks[T any](timestamp func(v T) int64, newGenerator func() eventtime.Generator) *WatermarkStrategy[T] {
	s := &WatermarkStrategy[T]{timestamp: timestamp}
	if newGenerator == nil {
		s.err = errors.New("nil watermark generator")
	}
	s.newGenerator = func() (eventtime.Generator, error) {
		g := newGenerator()
		if g == nil {
			return nil, errors.New("the watermark generator function returned nil")
		}
		return g, nil
	}
	return s
}

// WithIdleness marks a subtask idle when it has seen no value for d: its
// watermark then no longer holds back the operators downstream, which go
// on with the watermarks of the other subtasks; the subtask becomes active
// with its next value. Without it, a source subtask with no data (an empty
// partition) stalls event time downstream.
func (s *WatermarkStrategy[T]) WithIdleness(d time.Duration) *WatermarkStrategy[T] {
	c := *s
	if d <= 0 && c.err == nil {
		c.err = fmt.Errorf("idleness timeout %v must be positive", d)
	}
	c.idleness = d
	return &c
}

func (s *WatermarkStrategy[T]) generator() (eventtime.Generator, error) {
	g, err := s.newGenerator()
	if err != nil || s.idleness == 0 {
		return g, err
	}
	return eventtime.NewIdleness(g, s.idleness, time.Now)
}

// AssignTimestamps gives every value of s its event timestamp and
// generates watermarks from them, per subtask, as strategy says (Flink's
// assignTimestampsAndWatermarks). The returned stream carries the
// timestamps through every following operator and across exchanges;
// watermarks arriving from upstream stop here (the strategy makes new
// ones), except the final one at the end of the input. Applied right after
// a source, it runs in the source's tasks: per source subtask.
func AssignTimestamps[T any](s *Stream[T], strategy *WatermarkStrategy[T]) *Stream[T] {
	name := "timestamps/watermarks"
	switch {
	case strategy == nil:
		s.env.fail(fmt.Errorf("weir: operator %s: nil watermark strategy", name))
	case strategy.timestamp == nil:
		s.env.fail(fmt.Errorf("weir: operator %s: nil timestamp function", name))
	case strategy.err != nil:
		s.env.fail(fmt.Errorf("weir: operator %s: %w", name, strategy.err))
	}
	interval := s.env.cfg.watermarkInterval
	out := addOp(s, name, func(rc *graph.Subtask, next collector[T]) (collector[T], task.Operator) {
		o := &timestampsOp[T]{opBase: base(rc), strategy: strategy, next: next, interval: interval.Milliseconds()}
		return o, o
	})
	out.codec = s.codec
	out.timestamped = true
	return out
}

// timestampsOp assigns timestamps and generates watermarks (Flink's
// TimestampsAndWatermarksOperator).
type timestampsOp[T any] struct {
	opBase
	strategy *WatermarkStrategy[T]
	next     collector[T]
	interval int64 // ms between periodic emissions; 0: none
	ctx      *task.OperatorContext
	gen      eventtime.Generator
	emit     chainOutput
	out      *eventtime.DedupOutput
}

func (o *timestampsOp[T]) Open(ctx *task.OperatorContext) (err error) {
	o.enter()
	defer o.catch(&err)
	g, err := o.strategy.generator()
	if err != nil {
		return o.fail(err)
	}
	o.ctx, o.gen = ctx, g
	o.emit.ctx = ctx
	o.out = eventtime.NewDedupOutput(&o.emit)
	if o.interval > 0 {
		ctx.RequestProcessingTime(ctx.ProcessingTime() + o.interval)
	}
	return nil
}

func (o *timestampsOp[T]) collect(v T, _ int64) (err error) {
	o.enter()
	ts := o.strategy.timestamp(v)
	if err := o.next.collect(v, ts); err != nil {
		return err
	}
	o.enter()
	o.gen.OnEvent(ts, o.out)
	return o.emit.take()
}

func (o *timestampsOp[T]) OnProcessingTime(now int64) (err error) {
	o.enter()
	defer o.catch(&err)
	o.gen.OnPeriodicEmit(o.out)
	o.ctx.RequestProcessingTime(now + o.interval)
	return o.emit.take()
}

// ProcessWatermark stops upstream watermarks, except the final one.
func (o *timestampsOp[T]) ProcessWatermark(wm int64) (bool, error) {
	if wm == eventtime.MaxWatermark {
		o.out.EmitWatermark(wm)
		return false, o.emit.take()
	}
	return false, nil
}

// ProcessWatermarkStatus stops upstream statuses: this operator's own
// idleness detection decides.
func (o *timestampsOp[T]) ProcessWatermarkStatus(eventtime.Status) (bool, error) { return false, nil }

// chainOutput sends a generator's watermarks and statuses downstream of an
// operator, keeping the first error (the generator interface has none).
type chainOutput struct {
	ctx *task.OperatorContext
	err error
}

func (c *chainOutput) EmitWatermark(wm int64) {
	if c.err == nil {
		c.err = c.ctx.EmitWatermark(wm)
	}
}

func (c *chainOutput) MarkIdle() {
	if c.err == nil {
		c.err = c.ctx.EmitWatermarkStatus(eventtime.Idle)
	}
}

func (c *chainOutput) MarkActive() {
	if c.err == nil {
		c.err = c.ctx.EmitWatermarkStatus(eventtime.Active)
	}
}

// take returns and clears the first error.
func (c *chainOutput) take() error {
	err := c.err
	c.err = nil
	return err
}
