package window

import "fmt"

type triggerKind uint8

const (
	triggerDefault triggerKind = iota
	triggerEventTime
	triggerProcessingTime
	triggerNever
	triggerCount
	triggerContinuous
)

// Trigger decides when a window fires, that is emits its function's
// result over its contents (Flink's Trigger). The zero Trigger is the
// assigner's default: EventTimeTrigger for event-time windows,
// ProcessingTimeTrigger for processing-time windows, NeverTrigger for
// global windows.
type Trigger struct {
	kind    triggerKind
	n       int64 // count, or interval
	purging bool
}

// DefaultTrigger is the assigner's default trigger (the zero Trigger).
func DefaultTrigger() Trigger { return Trigger{} }

// EventTimeTrigger fires a window once the watermark passes its end
// (reaches its MaxTimestamp), and at once for each element that arrives
// later while the window lives (allowed lateness).
func EventTimeTrigger() Trigger { return Trigger{kind: triggerEventTime} }

// ProcessingTimeTrigger fires a window once processing time reaches its
// MaxTimestamp.
func ProcessingTimeTrigger() Trigger { return Trigger{kind: triggerProcessingTime} }

// NeverTrigger never fires.
func NeverTrigger() Trigger { return Trigger{kind: triggerNever} }

// CountTrigger fires a window at every n-th element it receives (n ≥ 1).
// It ignores time; the count restarts after each firing.
func CountTrigger(n int64) Trigger { return Trigger{kind: triggerCount, n: n} }

// ContinuousEventTimeTrigger fires a window every interval of event time
// (interval ≥ 1) from its first element on, and at its end. The first
// firing is at the element's timestamp rounded toward zero to a multiple
// of interval, plus interval; no firing is later than the window's
// MaxTimestamp. It needs event-time or global windows.
func ContinuousEventTimeTrigger(interval int64) Trigger {
	return Trigger{kind: triggerContinuous, n: interval}
}

// Purging makes t purge: wherever t fires a window, the window's contents
// are removed after the firing.
func Purging(t Trigger) Trigger {
	t.purging = true
	return t
}

// String describes t.
func (t Trigger) String() string {
	var s string
	switch t.kind {
	case triggerDefault:
		s = "default"
	case triggerEventTime:
		s = "event-time"
	case triggerProcessingTime:
		s = "processing-time"
	case triggerNever:
		s = "never"
	case triggerCount:
		s = fmt.Sprintf("count(%d)", t.n)
	case triggerContinuous:
		s = fmt.Sprintf("continuous-event-time(%d)", t.n)
	default:
		s = fmt.Sprintf("trigger(%d)", t.kind)
	}
	if t.purging {
		s = "purging-" + s
	}
	return s
}

// resolve replaces the default trigger by the assigner's.
func (t Trigger) resolve(a Assigner, tm Time) Trigger {
	if t.kind != triggerDefault {
		return t
	}
	switch {
	case a.kind == assignerGlobal:
		t.kind = triggerNever
	case tm == ProcessingTime:
		t.kind = triggerProcessingTime
	default:
		t.kind = triggerEventTime
	}
	return t
}

func (t Trigger) validate(a Assigner, tm Time) error {
	switch t.kind {
	case triggerDefault, triggerEventTime, triggerProcessingTime, triggerNever:
	case triggerCount:
		if t.n < 1 {
			return fmt.Errorf("window: count trigger of %d elements, want ≥ 1", t.n)
		}
	case triggerContinuous:
		if t.n < 1 {
			return fmt.Errorf("window: continuous trigger interval %d, want ≥ 1", t.n)
		}
		if tm == ProcessingTime {
			return fmt.Errorf("window: a continuous event-time trigger on processing-time windows")
		}
	default:
		return fmt.Errorf("window: unknown trigger %d", t.kind)
	}
	return nil
}

// triggerResult is what a trigger answers.
type triggerResult uint8

const (
	resultContinue triggerResult = 0
	resultFire     triggerResult = 1
	resultPurge    triggerResult = 2
)

func (r triggerResult) fire() bool  { return r&resultFire != 0 }
func (r triggerResult) purge() bool { return r&resultPurge != 0 }

// fired is what the operator's trigger answers for a firing.
func (o *core) fired() triggerResult {
	if o.trigger.purging {
		return resultFire | resultPurge
	}
	return resultFire
}

// The trigger's callbacks run with the operator's current record key
// (o.key) and get the window; they read and write trigger state under the
// window's key and register timers under the record key.

func (o *core) triggerOnElement(w Window, ts int64) (triggerResult, error) {
	mt := w.MaxTimestamp()
	switch o.trigger.kind {
	case triggerEventTime:
		if mt <= o.timers.CurrentWatermark() {
			return o.fired(), nil
		}
		return resultContinue, o.registerEventTimer(w, mt)
	case triggerProcessingTime:
		return resultContinue, o.registerProcessingTimer(w, mt)
	case triggerCount:
		o.useWindow(w)
		c, _, err := o.getInt(o.countID)
		if err != nil {
			return 0, err
		}
		if c++; c >= o.trigger.n {
			return o.fired(), o.b.Clear(o.countID)
		}
		return resultContinue, o.putInt(o.countID, c)
	case triggerContinuous:
		if mt <= o.timers.CurrentWatermark() {
			return o.fired(), nil
		}
		if err := o.registerEventTimer(w, mt); err != nil {
			return 0, err
		}
		o.useWindow(w)
		_, ok, err := o.getInt(o.fireID)
		if err != nil || ok {
			return resultContinue, err
		}
		i := o.trigger.n
		next := min(addSat(ts-ts%i, i), mt)
		if err := o.putInt(o.fireID, next); err != nil {
			return 0, err
		}
		return resultContinue, o.registerEventTimer(w, next)
	}
	return resultContinue, nil
}

func (o *core) triggerOnEventTime(w Window, t int64) (triggerResult, error) {
	mt := w.MaxTimestamp()
	switch o.trigger.kind {
	case triggerEventTime:
		if t == mt {
			return o.fired(), nil
		}
	case triggerContinuous:
		if t == mt {
			return o.fired(), nil
		}
		o.useWindow(w)
		f, ok, err := o.getInt(o.fireID)
		if err != nil || !ok || f != t {
			return resultContinue, err
		}
		next := min(addSat(t, o.trigger.n), mt)
		if err := o.putInt(o.fireID, next); err != nil {
			return 0, err
		}
		return o.fired(), o.registerEventTimer(w, next)
	}
	return resultContinue, nil
}

func (o *core) triggerOnProcessingTime(Window, int64) triggerResult {
	if o.trigger.kind == triggerProcessingTime {
		return o.fired()
	}
	return resultContinue
}

// triggerOnMerge runs when the sessions merged (ascending by start) merge
// into r: trigger state moves from them to r.
func (o *core) triggerOnMerge(r Window, merged []Window) error {
	mt := r.MaxTimestamp()
	switch o.trigger.kind {
	case triggerEventTime:
		if mt > o.timers.CurrentWatermark() {
			return o.registerEventTimer(r, mt)
		}
	case triggerProcessingTime:
		if mt > o.now() {
			return o.registerProcessingTimer(r, mt)
		}
	case triggerCount:
		sum, any, err := o.takeInts(o.countID, merged, func(a, b int64) int64 { return a + b })
		if err != nil || !any {
			return err
		}
		o.useWindow(r)
		return o.putInt(o.countID, sum)
	case triggerContinuous:
		first, any, err := o.takeInts(o.fireID, merged, func(a, b int64) int64 { return min(a, b) })
		if err != nil || !any {
			return err
		}
		o.useWindow(r)
		if err := o.putInt(o.fireID, first); err != nil {
			return err
		}
		return o.registerEventTimer(r, first)
	}
	return nil
}

// takeInts folds the int64 state id of the windows ws with f, removing it
// from each; any reports whether one of them had it.
func (o *core) takeInts(id stateID, ws []Window, f func(a, b int64) int64) (acc int64, any bool, err error) {
	for _, m := range ws {
		o.useWindow(m)
		v, ok, err := o.getInt(id)
		if err != nil {
			return 0, false, err
		}
		if !ok {
			continue
		}
		if any {
			acc = f(acc, v)
		} else {
			acc, any = v, true
		}
		if err := o.b.Clear(id); err != nil {
			return 0, false, err
		}
	}
	return acc, any, nil
}

// triggerClear removes w's trigger state and timers.
func (o *core) triggerClear(w Window) error {
	switch o.trigger.kind {
	case triggerEventTime:
		return o.deleteEventTimer(w, w.MaxTimestamp())
	case triggerProcessingTime:
		return o.deleteProcessingTimer(w, w.MaxTimestamp())
	case triggerCount:
		o.useWindow(w)
		return o.b.Clear(o.countID)
	case triggerContinuous:
		o.useWindow(w)
		f, ok, err := o.getInt(o.fireID)
		if err != nil || !ok {
			return err
		}
		if err := o.b.Clear(o.fireID); err != nil {
			return err
		}
		return o.deleteEventTimer(w, f)
	}
	return nil
}
