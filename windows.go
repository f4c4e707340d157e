package weir

import (
	"fmt"
	"time"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/eventtime/window"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// WindowAssigner decides which windows a value belongs to. Build one with
// TumblingWindows, SlidingWindows, SessionWindows or GlobalWindows; by
// default windows follow event time (the values' timestamps, see
// AssignTimestamps), InProcessingTime makes them follow the clock.
type WindowAssigner struct {
	kind                     assignerKind
	size, slide, gap, offset time.Duration
	processing               bool
	err                      error
}

type assignerKind uint8

const (
	tumbling assignerKind = iota + 1
	sliding
	session
	global
)

// TumblingWindows are back-to-back windows of length size: each value
// falls in exactly one.
func TumblingWindows(size time.Duration) WindowAssigner {
	return WindowAssigner{kind: tumbling, size: size, err: positive("window size", size)}
}

// SlidingWindows are windows of length size starting every slide: a value
// falls in size/slide of them.
func SlidingWindows(size, slide time.Duration) WindowAssigner {
	err := positive("window size", size)
	if err == nil {
		err = positive("window slide", slide)
	}
	return WindowAssigner{kind: sliding, size: size, slide: slide, err: err}
}

// SessionWindows group the values of a key into sessions: a session ends
// when no value arrived for gap; sessions that come to touch merge (and
// so does their state).
func SessionWindows(gap time.Duration) WindowAssigner {
	return WindowAssigner{kind: session, gap: gap, err: positive("session gap", gap)}
}

// GlobalWindows put all values of a key in one window that never ends: it
// fires only by its trigger (CountTrigger, ContinuousEventTimeTrigger).
func GlobalWindows() WindowAssigner { return WindowAssigner{kind: global} }

// WithOffset shifts the window starts of tumbling or sliding windows by
// offset (e.g. -8h for daily windows in UTC+8); |offset| must be below
// the size (tumbling) or slide (sliding).
func (w WindowAssigner) WithOffset(offset time.Duration) WindowAssigner {
	w.offset = offset
	return w
}

// InProcessingTime makes the windows follow processing time: a value
// belongs to the windows of the time it arrives, and a window fires when
// the clock passes its end.
func (w WindowAssigner) InProcessingTime() WindowAssigner {
	w.processing = true
	return w
}

// core returns the window core's assigner.
func (w WindowAssigner) core() window.Assigner {
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	switch w.kind {
	case tumbling:
		return window.TumblingWindows(ms(w.size), ms(w.offset))
	case sliding:
		return window.SlidingWindows(ms(w.size), ms(w.slide), ms(w.offset))
	case session:
		return window.SessionWindows(ms(w.gap))
	case global:
		return window.GlobalWindows()
	}
	return window.Assigner{}
}

func positive(what string, d time.Duration) error {
	if d < time.Millisecond {
		return fmt.Errorf("%s %v must be at least 1ms", what, d)
	}
	return nil
}

// WindowTrigger decides when a window fires: emits its function's result
// over its contents. Without one, event-time windows fire when the
// watermark passes their end, processing-time windows when the clock
// does, and global windows never.
type WindowTrigger struct{ t window.Trigger }

// EventTimeTrigger fires a window when the watermark passes its end, and
// again for each late value within the allowed lateness.
func EventTimeTrigger() WindowTrigger { return WindowTrigger{window.EventTimeTrigger()} }

// ProcessingTimeTrigger fires a window when the clock passes its end.
func ProcessingTimeTrigger() WindowTrigger { return WindowTrigger{window.ProcessingTimeTrigger()} }

// CountTrigger fires a window at every n-th value it receives.
func CountTrigger(n int64) WindowTrigger { return WindowTrigger{window.CountTrigger(n)} }

// ContinuousEventTimeTrigger fires a window every interval of event time
// and at its end: early results before an event-time window closes.
func ContinuousEventTimeTrigger(interval time.Duration) WindowTrigger {
	return WindowTrigger{window.ContinuousEventTimeTrigger(interval.Milliseconds())}
}

// Purging makes t clear a window's contents after each firing, so that
// the next firing has only what came since.
func Purging(t WindowTrigger) WindowTrigger { return WindowTrigger{window.Purging(t.t)} }

// TimeWindow is a window [Start, End) of event or processing time, in ms;
// the global window has Start math.MinInt64 and End math.MaxInt64.
type TimeWindow struct {
	Start, End int64
}

// MaxTimestamp is the window's last timestamp, End-1: the timestamp of its
// results.
func (w TimeWindow) MaxTimestamp() int64 {
	return window.Window{Start: w.Start, End: w.End}.MaxTimestamp()
}

func (w TimeWindow) String() string { return fmt.Sprintf("[%d,%d)", w.Start, w.End) }

// Windowed is one result of a window function: the key, the window and
// the value.
type Windowed[K, V any] struct {
	Key    K
	Window TimeWindow
	Value  V
}

// WindowedStream is a keyed stream cut into windows; apply a window
// function to it (WindowReduce, WindowAggregate, WindowProcess).
type WindowedStream[T, K any] struct {
	ks       *KeyedStream[T, K]
	assigner WindowAssigner
	trigger  window.Trigger
	lateness time.Duration
	late     *Stream[T] // LateData's stream, once asked for
	node     *graph.Node
	name     string
}

// Window cuts the keyed stream ks into windows.
func Window[T, K any](ks *KeyedStream[T, K], a WindowAssigner) *WindowedStream[T, K] {
	return &WindowedStream[T, K]{ks: ks, assigner: a, name: "window"}
}

// Trigger sets when windows fire (see WindowTrigger).
func (w *WindowedStream[T, K]) Trigger(t WindowTrigger) *WindowedStream[T, K] {
	w.trigger = t.t
	return w
}

// AllowedLateness keeps event-time windows for d after their end: a value
// behind the watermark by at most d still joins its window and fires it
// again. Later values are late: they go to LateData, or are dropped and
// counted.
func (w *WindowedStream[T, K]) AllowedLateness(d time.Duration) *WindowedStream[T, K] {
	w.lateness = d
	return w
}

// LateData returns the stream of the late values: those that arrived
// after their windows were gone (later than the allowed lateness). Call it
// after the window function; without it, late values are dropped (and
// counted).
func (w *WindowedStream[T, K]) LateData() *Stream[T] {
	env := w.ks.s.env
	if w.node == nil {
		env.fail(fmt.Errorf("weir: window: call LateData after the window function (WindowReduce, WindowAggregate, WindowProcess)"))
		return newStream[T](env, env.addNode(&graph.Node{Name: "late data", Source: true}))
	}
	if w.late != nil {
		return w.late
	}
	in := w.ks.s
	n := env.addNode(&graph.Node{Name: w.node.Name + " late data", Kind: "late data"})
	connect(&Stream[T]{env: env, n: w.node, codec: in.codec, timestamped: in.timestamped, side: 1}, n)
	n.Instantiate = func(rc *graph.Subtask, out any) (any, task.Operator, error) {
		next, _ := out.(collector[T])
		if next == nil {
			next = discard[T]{}
		}
		o := &passOp[T]{opBase: base(rc), next: next}
		return o, o, nil
	}
	w.late = newStream[T](env, n)
	w.late.codec, w.late.timestamped = in.codec, in.timestamped
	return w.late
}

// passOp forwards its input: the head of a side output's consumers.
type passOp[T any] struct {
	opBase
	next collector[T]
}

func (o *passOp[T]) collect(v T, ts int64) error { return o.next.collect(v, ts) }

// WindowReduce folds the values of each window with fn as they arrive
// (one value kept per window) and emits the result when the window fires.
func WindowReduce[T, K any](w *WindowedStream[T, K], fn func(acc, v T) T) *Stream[Windowed[K, T]] {
	if fn == nil {
		w.ks.s.env.fail(fmt.Errorf("weir: window reduce: nil function"))
	}
	return windowOp(w, "window reduce", window.Reduce(w.ks.s.codec, fn), w.ks.s.codec)
}

// AggregateFunction adds values into an accumulator (incremental
// aggregation): New makes an empty one, Add adds a value, Merge combines
// two (needed for session windows, whose accumulators merge), Result turns
// one into the window's result. Codec serializes accumulators in state.
type AggregateFunction[IN, ACC, OUT any] struct {
	Codec  codec.Codec[ACC]
	New    func() ACC
	Add    func(acc ACC, v IN) ACC
	Merge  func(a, b ACC) ACC
	Result func(acc ACC) OUT
}

// WindowAggregate aggregates the values of each window with f as they
// arrive and emits f.Result when the window fires. out serializes the
// results (nil: the built-in codec of OUT, if it has one).
func WindowAggregate[T, K, ACC, OUT any](w *WindowedStream[T, K], f AggregateFunction[T, ACC, OUT], out codec.Codec[OUT]) *Stream[Windowed[K, OUT]] {
	if out == nil {
		out = defaultCodec[OUT]()
	}
	if f.Codec == nil {
		f.Codec = defaultCodec[ACC]()
	}
	fn := window.Aggregate(window.AggregateFunction[T, ACC, OUT]{Codec: f.Codec, New: f.New, Add: f.Add, Merge: f.Merge, Result: f.Result})
	res := windowOp(w, "window aggregate", fn, out)
	w.ks.s.env.check(func() error {
		what := "operator " + res.n.Name
		switch {
		case f.New == nil || f.Add == nil || f.Result == nil:
			return fmt.Errorf("weir: %s: AggregateFunction needs New, Add and Result", what)
		case f.Codec == nil:
			// Window contents are keyed state, serialized at every
			// checkpoint and by some backends at every access.
			return noCodec[ACC](what, "its accumulators are keyed state", "set AggregateFunction.Codec")
		}
		return nil
	})
	return res
}

// WindowProcessFunc computes the results of one firing of key's window
// from all its values (in arrival order; after a session merge, the
// merged sessions' values by session start) and emits them; their
// timestamp is the window's MaxTimestamp.
type WindowProcessFunc[K, T, OUT any] func(key K, w TimeWindow, values []T, out *Collector[OUT]) error

// WindowProcess keeps every value of each window and hands them all to fn
// when the window fires (Flink's ProcessWindowFunction). out serializes
// the results (nil: the built-in codec of OUT, if it has one).
func WindowProcess[T, K, OUT any](w *WindowedStream[T, K], fn WindowProcessFunc[K, T, OUT], out codec.Codec[OUT]) *Stream[OUT] {
	if fn == nil {
		w.ks.s.env.fail(fmt.Errorf("weir: window process: nil function"))
	}
	if out == nil {
		out = defaultCodec[OUT]()
	}
	kc := w.ks.kc
	wf := window.Process(w.ks.s.codec, func(key []byte, win window.Window, elems []T, emit func(OUT) error) error {
		k, err := kc.Decode(key)
		if err != nil {
			return fmt.Errorf("decoding the key of window %v: %w", win, err)
		}
		c := &Collector[OUT]{next: emitFunc[OUT](emit)}
		if err := fn(k, TimeWindow{Start: win.Start, End: win.End}, elems, c); err != nil {
			return err
		}
		return c.err
	})
	return addWindowOp(w, "window process", wf, out, func(_ []byte, _ window.Window, v OUT) (OUT, error) { return v, nil })
}

// emitFunc adapts the window core's emit function to a collector.
type emitFunc[T any] func(T) error

func (f emitFunc[T]) collect(v T, _ int64) error { return f(v) }

// windowOp adds a window operator whose results are Windowed values.
func windowOp[T, K, OUT any](w *WindowedStream[T, K], name string, fn window.Function[T, OUT], out codec.Codec[OUT]) *Stream[Windowed[K, OUT]] {
	kc := w.ks.kc
	var rc codec.Codec[Windowed[K, OUT]]
	if out != nil && kc != nil {
		rc = codec.Struct4(kc, func(w Windowed[K, OUT]) K { return w.Key },
			codec.Int64(), func(w Windowed[K, OUT]) int64 { return w.Window.Start },
			codec.Int64(), func(w Windowed[K, OUT]) int64 { return w.Window.End },
			out, func(w Windowed[K, OUT]) OUT { return w.Value },
			func(k K, start, end int64, v OUT) Windowed[K, OUT] {
				return Windowed[K, OUT]{Key: k, Window: TimeWindow{Start: start, End: end}, Value: v}
			})
	}
	return addWindowOp(w, name, fn, rc, func(key []byte, win window.Window, v OUT) (Windowed[K, OUT], error) {
		k, err := kc.Decode(key)
		if err != nil {
			return Windowed[K, OUT]{}, fmt.Errorf("decoding the key of window %v: %w", win, err)
		}
		return Windowed[K, OUT]{Key: k, Window: TimeWindow{Start: win.Start, End: win.End}, Value: v}, nil
	})
}

// addWindowOp adds the window operator node of w: fn keeps the windows'
// contents, result turns each of fn's results into the stream's values,
// rc serializes them.
func addWindowOp[T, K, OUT, R any](w *WindowedStream[T, K], name string, fn window.Function[T, OUT], rc codec.Codec[R],
	result func(key []byte, w window.Window, v OUT) (R, error)) *Stream[R] {
	ks := w.ks
	s := ks.s
	env := s.env
	if w.node != nil {
		env.fail(fmt.Errorf("weir: %s: a windowed stream takes one window function", name))
	}
	cfg := window.Config{Assigner: w.assigner.core(), Trigger: w.trigger, AllowedLateness: w.lateness.Milliseconds(), Name: "window"}
	if w.assigner.processing {
		cfg.Time = window.ProcessingTime
		cfg.Clock = func() int64 { return time.Now().UnixMilli() }
	}
	eventTime := !w.assigner.processing && w.assigner.kind != global
	switch {
	case w.assigner.kind == 0:
		env.fail(fmt.Errorf("weir: operator %s: no window assigner", name))
	case w.assigner.err != nil:
		env.fail(fmt.Errorf("weir: operator %s: %w", name, w.assigner.err))
	case w.lateness < 0:
		env.fail(fmt.Errorf("weir: operator %s: allowed lateness %v must not be negative", name, w.lateness))
	case eventTime && !s.timestamped:
		env.fail(fmt.Errorf("weir: operator %s: event-time windows on a stream without timestamps: call AssignTimestamps before KeyBy (or use InProcessingTime)", name))
	default:
		if err := cfg.Validate(); err != nil {
			env.fail(fmt.Errorf("weir: operator %s: %w", name, err))
		}
	}
	n := env.addNode(&graph.Node{Name: name, Keyed: true})
	connectInput(s, n, 0, ks.keyHasher)
	sideCodec := s.codec
	n.Sides = []graph.SideOutput{{
		Fanout: fanoutOf[T],
		NewWriter: func(e *graph.Edge, p *network.ResultPartition, sub int, flush bool) (any, error) {
			return s.newWriter(e, p, sub, flush)
		},
		HasCodec: func() bool { return sideCodec != nil },
		Type:     typeName[T](),
	}}
	n.Instantiate = func(rc *graph.Subtask, out any) (any, task.Operator, error) {
		next, _ := out.(collector[R])
		if next == nil {
			next = discard[R]{}
		}
		var late collector[T]
		if len(rc.Sides) > 0 && rc.Sides[0] != nil {
			late = rc.Sides[0].(collector[T])
		}
		cfg := cfg
		cfg.SideOutputLateData = late != nil
		o := &windowOperator[T, K, OUT, R]{opBase: base(rc), cfg: cfg, fn: fn, next: next, late: late, result: result,
			key: ks.fn, kc: ks.kc, hash: codec.HashFunc(ks.kc), maxPar: rc.MaxParallelism}
		return o, o, nil
	}
	w.node = n
	res := newStream[R](env, n)
	res.codec = rc
	res.timestamped = true // results carry their window's MaxTimestamp
	return res
}

// windowOperator runs the window core (eventtime/window) in a task.
type windowOperator[T, K, OUT, R any] struct {
	opBase
	cfg    window.Config
	fn     window.Function[T, OUT]
	next   collector[R]
	late   collector[T] // nil: late values are dropped
	result func(key []byte, w window.Window, v OUT) (R, error)
	key    func(T) K
	kc     codec.Codec[K]
	hash   func(K) uint64 // codec.Hash64 of the encoded key, without encoding
	maxPar int

	ctx     *task.OperatorContext
	core    *window.Operator[T, OUT]
	keyBuf  []byte
	reqProc int64 // the processing time last requested
}

func (o *windowOperator[T, K, OUT, R]) Open(ctx *task.OperatorContext) error {
	o.ctx = ctx
	if err := state.RegisterKeyCodec(ctx.Keyed, o.kc); err != nil {
		return err
	}
	core, err := window.New(ctx.Keyed, o.cfg, o.fn, o)
	if err != nil {
		return err
	}
	if err := window.UseKeyCodec(core, o.kc); err != nil {
		return err
	}
	o.core = core
	o.requestProcessingTime()
	return nil
}

func (o *windowOperator[T, K, OUT, R]) collect(v T, ts int64) error {
	return o.collectInGroup(v, ts, -1)
}

// collectInGroup processes v, whose key's key group is kg (-1: compute it).
func (o *windowOperator[T, K, OUT, R]) collectInGroup(v T, ts int64, kg int) error {
	o.enter()
	k := o.key(v)
	o.keyBuf = o.kc.Append(o.keyBuf[:0], k)
	if kg < 0 {
		kg = keygroup.ForHash(o.hash(k), o.maxPar)
	}
	if err := o.core.ProcessElement(o.keyBuf, kg, ts, v); err != nil {
		return err
	}
	if o.cfg.Time == window.ProcessingTime {
		o.requestProcessingTime()
	}
	return nil
}

// Emit implements window.Output: a window's result goes downstream with
// the window's MaxTimestamp.
func (o *windowOperator[T, K, OUT, R]) Emit(key []byte, w window.Window, v OUT) error {
	r, err := o.result(key, w, v)
	if err != nil {
		return err
	}
	err = o.next.collect(r, w.MaxTimestamp())
	o.enter() // the window function resumes
	return err
}

// Late implements window.Output.
func (o *windowOperator[T, K, OUT, R]) Late(_ []byte, ts int64, v T) error {
	err := o.late.collect(v, ts)
	o.enter()
	return err
}

// SnapshotState writes the window timers into the keyed backend, which
// the task snapshots next.
func (o *windowOperator[T, K, OUT, R]) SnapshotState(barrier.CheckpointID) error {
	return o.core.PrepareSnapshot()
}

func (o *windowOperator[T, K, OUT, R]) ProcessWatermark(wm int64) (_ bool, err error) {
	o.enter()
	defer o.catch(&err)
	if err := o.core.AdvanceWatermark(wm); err != nil {
		return false, err
	}
	o.requestProcessingTime()
	return true, nil
}

func (o *windowOperator[T, K, OUT, R]) ProcessWatermarkStatus(eventtime.Status) (bool, error) {
	return true, nil
}

func (o *windowOperator[T, K, OUT, R]) OnProcessingTime(now int64) (err error) {
	o.enter()
	defer o.catch(&err)
	o.reqProc = 0
	if err := o.core.AdvanceProcessingTime(now); err != nil {
		return err
	}
	o.requestProcessingTime()
	return nil
}

// requestProcessingTime asks the task for a callback at the core's next
// processing-time timer.
func (o *windowOperator[T, K, OUT, R]) requestProcessingTime() {
	if t, ok := o.core.NextProcessingTime(); ok && t != o.reqProc {
		o.reqProc = t
		o.ctx.RequestProcessingTime(t)
	}
}

// LateRecordsDropped counts the late values dropped (Flink's
// numLateRecordsDropped).
func (o *windowOperator[T, K, OUT, R]) LateRecordsDropped() int64 { return o.core.LateRecordsDropped() }
