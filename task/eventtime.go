package task

import (
	"fmt"
	"math"
	"time"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/eventtime"
)

// EventTimeOperator is an Operator that takes part in event time. The task
// calls it, in chain order, whenever the watermark reaching it advances or
// its input's watermark status changes, before the operators after it and
// the task's outputs see the change: an operator fires its event-time
// timers up to the watermark (emitting their results into the chain)
// before the watermark goes on. Operators that are not EventTimeOperators
// pass watermarks and statuses through.
type EventTimeOperator interface {
	Operator
	// ProcessWatermark advances the operator's event time to wm. It
	// returns false to stop wm here: an operator that generates
	// watermarks itself (a timestamp assigner) emits its own through
	// OperatorContext.EmitWatermark.
	ProcessWatermark(wm int64) (forward bool, err error)
	// ProcessWatermarkStatus tells the operator that its input became
	// idle or active again; false stops the change here.
	ProcessWatermarkStatus(s eventtime.Status) (forward bool, err error)
}

// ProcessingTimeOperator is an Operator with processing-time callbacks:
// OnProcessingTime runs in the task's goroutine (never concurrently with
// records) once the time an operator requested through
// OperatorContext.RequestProcessingTime has come.
type ProcessingTimeOperator interface {
	Operator
	// OnProcessingTime is called with the task's processing time (unix
	// ms); the operator fires what is due and requests its next callback.
	OnProcessingTime(now int64) error
}

// EmitWatermark sends wm downstream of the operator: to the operators
// chained after it (EventTimeOperators advance their event time), then to
// the task's outputs, unless an operator on the way stops it. Watermarks
// not above the last one the task sent are dropped at the outputs. Call it
// only from the task's goroutine, within a call of the task into the
// operator.
func (c *OperatorContext) EmitWatermark(wm int64) error { return c.t.emitWatermarkFrom(c.index+1, wm) }

// EmitWatermarkStatus sends a watermark status change downstream of the
// operator, as EmitWatermark does.
func (c *OperatorContext) EmitWatermarkStatus(s eventtime.Status) error {
	return c.t.emitStatusFrom(c.index+1, s)
}

// ProcessingTime returns the task's processing time, in unix ms.
func (c *OperatorContext) ProcessingTime() int64 { return time.Now().UnixMilli() }

// RequestProcessingTime asks for a call of the operator's
// OnProcessingTime (it must be a ProcessingTimeOperator) at or after at
// (unix ms). Requests keep the earliest time; each callback clears it, and
// the operator asks for its next one then.
func (c *OperatorContext) RequestProcessingTime(at int64) { c.t.proc.request(c.index, at) }

// noTime marks no pending processing-time request.
const noTime = math.MaxInt64

// procTimers are the operators' processing-time requests.
type procTimers struct {
	at   []int64 // per operator, noTime if none
	next int64   // min(at)
}

func newProcTimers(n int) procTimers {
	p := procTimers{at: make([]int64, n), next: noTime}
	for i := range p.at {
		p.at[i] = noTime
	}
	return p
}

func (p *procTimers) request(op int, at int64) {
	if at < p.at[op] {
		p.at[op] = at
		p.next = min(p.next, at)
	}
}

// fireProcessingTime calls every operator whose requested time has come.
func (t *Task) fireProcessingTime(now int64) error {
	p := &t.proc
	p.next = noTime
	for i, at := range p.at {
		if at > now {
			p.next = min(p.next, at)
			continue
		}
		p.at[i] = noTime
		op, ok := t.cfg.Operators[i].(ProcessingTimeOperator)
		if !ok {
			return &Error{Task: t.cfg.Name, Operator: t.cfg.Operators[i].Name(), Err: fmt.Errorf("requested processing time but has no OnProcessingTime")}
		}
		if err := op.OnProcessingTime(now); err != nil {
			return t.operatorErr(t.cfg.Operators[i], err)
		}
		p.next = min(p.next, p.at[i]) // a new request made by the callback
	}
	// Requests made by later callbacks for earlier operators.
	for _, at := range p.at {
		p.next = min(p.next, at)
	}
	return nil
}

// outputTime is what the task forwarded to its outputs.
type outputTime struct {
	watermark int64
	idle      bool
}

// emitWatermarkFrom hands wm to the operators from index i on, then to the
// outputs.
func (t *Task) emitWatermarkFrom(i int, wm int64) error {
	for ; i < len(t.cfg.Operators); i++ {
		op, ok := t.cfg.Operators[i].(EventTimeOperator)
		if !ok {
			continue
		}
		fwd, err := op.ProcessWatermark(wm)
		if err != nil {
			return t.operatorErr(op, err)
		}
		if !fwd {
			return nil
		}
	}
	if wm <= t.out.watermark {
		return nil
	}
	t.out.watermark = wm
	if len(t.cfg.Outputs) > 0 {
		t.broadcastEvent(watermarkPayload(wm), buffer.Event)
	}
	return nil
}

// emitStatusFrom hands status s to the operators from index i on, then
// to the outputs.
func (t *Task) emitStatusFrom(i int, s eventtime.Status) error {
	for ; i < len(t.cfg.Operators); i++ {
		op, ok := t.cfg.Operators[i].(EventTimeOperator)
		if !ok {
			continue
		}
		fwd, err := op.ProcessWatermarkStatus(s)
		if err != nil {
			return t.operatorErr(op, err)
		}
		if !fwd {
			return nil
		}
	}
	idle := s == eventtime.Idle
	if idle == t.out.idle {
		return nil
	}
	t.out.idle = idle
	if len(t.cfg.Outputs) > 0 {
		t.broadcastEvent(statusPayload(s), buffer.Event)
	}
	return nil
}

// applyEmission forwards what the inputs' valve emitted: its watermarks
// first, then its status change. A watermark the valve does not forward
// (the task announced idle) still moves the chain head's event time, and
// goes no further (Flink's outputs drop watermarks while idle).
func (t *Task) applyEmission(e eventtime.CombinedEmission) error {
	for _, wm := range e.Watermarks[:e.Count] {
		var err error
		if e.Forward {
			err = t.emitWatermarkFrom(0, wm)
		} else {
			err = t.advanceHead(wm)
		}
		if err != nil {
			return err
		}
	}
	if e.StatusChanged {
		return t.emitStatusFrom(0, e.Status)
	}
	return nil
}

// advanceHead moves the chain head's event time to wm without sending wm
// on.
func (t *Task) advanceHead(wm int64) error {
	if len(t.cfg.Operators) == 0 {
		return nil
	}
	if op, ok := t.cfg.Operators[0].(EventTimeOperator); ok {
		if _, err := op.ProcessWatermark(wm); err != nil {
			return t.operatorErr(op, err)
		}
	}
	return nil
}

// operatorErr names op in err unless it names an operator already.
func (t *Task) operatorErr(op Operator, err error) error {
	if te, ok := err.(*Error); ok {
		if te.Task == "" {
			te.Task = t.cfg.Name
		}
		if te.Operator == "" {
			te.Operator = op.Name()
		}
		return te
	}
	return &Error{Task: t.cfg.Name, Operator: op.Name(), Err: err}
}

// InputWatermark returns the task's combined input watermark: the
// minimum over its inputs that are not idle (eventtime.MinWatermark for a
// source task or before any watermark). Only from the task's goroutine,
// or after Run returned.
func (t *Task) InputWatermark() int64 {
	if t.valve == nil {
		return eventtime.MinWatermark
	}
	return t.valve.Watermark()
}

// OutputWatermark returns the last watermark the task sent downstream.
// Only from the task's goroutine, or after Run returned.
func (t *Task) OutputWatermark() int64 { return t.out.watermark }
