package weir

import (
	"errors"
	"fmt"
	"time"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/eventtime/join"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/task"
)

// This file holds the joins of two streams: the interval join (keyed,
// event time, on the join.Interval core) and the window join and coGroup
// (both sides' values tagged, united, keyed and windowed by the window
// operator, as Flink's JoinedStreams and CoGroupedStreams do).

// IntervalJoinBuilder is an interval join of two keyed streams being set
// up: IntervalJoin(left, right).Between(lower, upper).Process(fn).
type IntervalJoinBuilder[Out, A, B, K any] struct {
	left         *KeyedStream[A, K]
	right        *KeyedStream[B, K]
	lower, upper time.Duration
	lowerExcl    bool
	upperExcl    bool
	between      bool
}

// IntervalJoin joins two keyed streams with the same key type by event
// time (Flink's KeyedStream.intervalJoin): a left value at l and a right
// value at r of the same key make a pair when l + lower ≤ r ≤ l + upper
// (Between). It is an inner join; a pair's timestamp is the larger of its
// two. Out is the type of what Process makes of a pair (Go methods cannot
// add type parameters, so it is named here: IntervalJoin[Out](a, b)).
//
// Both streams need timestamps (AssignTimestamps) and codecs: each side
// keeps its values, per key and timestamp, in keyed state as long as a
// value of the other side could still match them, and drops them once
// the operator's watermark — the minimum of both inputs' — makes them
// unmatchable. Values behind the watermark are late: dropped and counted
// (numLateRecordsDropped).
func IntervalJoin[Out, A, B, K any](left *KeyedStream[A, K], right *KeyedStream[B, K]) *IntervalJoinBuilder[Out, A, B, K] {
	return &IntervalJoinBuilder[Out, A, B, K]{left: left, right: right}
}

// IntervalBound is an option of Between.
type IntervalBound uint8

const (
	// LowerBoundExclusive makes the lower bound exclusive: l + lower < r.
	LowerBoundExclusive IntervalBound = 1 << iota
	// UpperBoundExclusive makes the upper bound exclusive: r < l + upper.
	UpperBoundExclusive
)

// Between sets the join's bounds, relative to the left value's timestamp
// and inclusive unless an option makes them exclusive; they count in
// whole milliseconds. lower > upper is an error from Execute.
func (j *IntervalJoinBuilder[Out, A, B, K]) Between(lower, upper time.Duration, opts ...IntervalBound) *IntervalJoinBuilder[Out, A, B, K] {
	j.lower, j.upper, j.between = lower, upper, true
	for _, o := range opts {
		j.lowerExcl = j.lowerExcl || o&LowerBoundExclusive != 0
		j.upperExcl = j.upperExcl || o&UpperBoundExclusive != 0
	}
	return j
}

// Process returns the stream of fn applied to every pair the join makes,
// each with the pair's timestamp (the larger of its values').
func (j *IntervalJoinBuilder[Out, A, B, K]) Process(fn func(left A, right B) Out) *Stream[Out] {
	env := j.left.s.env
	cfg := join.IntervalConfig{Lower: j.lower.Milliseconds(), Upper: j.upper.Milliseconds(),
		LowerExclusive: j.lowerExcl, UpperExclusive: j.upperExcl}
	la, rb := j.left.s.codec, j.right.s.codec
	out := addKeyedTwoInputOp(j.left, j.right, "interval join", func(rc *graph.Subtask, k1 *keyContext[A, K], k2 *keyContext[B, K], next collector[Out]) (collector[A], collector[B], task.Operator, error) {
		o := &intervalJoinOp[Out, A, B, K]{opBase: base(rc), k1: k1, k2: k2, fn: fn, cfg: cfg, ca: la, cb: rb, next: next}
		return inputFunc[A](o.process1), inputFunc[B](o.process2), o, nil
	})
	out.timestamped = true
	name := func() string { return out.n.Name }
	env.check(func() error {
		switch {
		case !j.between:
			return fmt.Errorf("weir: operator %s: an interval join needs its bounds (Between)", name())
		case fn == nil:
			return fmt.Errorf("weir: operator %s: nil function", name())
		case j.lower > j.upper:
			return fmt.Errorf("weir: operator %s: lower bound %v above upper bound %v", name(), j.lower, j.upper)
		case !j.left.s.timestamped || !j.right.s.timestamped:
			return fmt.Errorf("weir: operator %s: an interval join works in event time: both inputs need timestamps (AssignTimestamps)", name())
		case la == nil || rb == nil:
			return fmt.Errorf("weir: operator %s: the inputs' types need codecs: the join keeps their values in keyed state (call WithCodec)", name())
		}
		if _, _, err := cfg.Bounds(); err != nil {
			return fmt.Errorf("weir: operator %s: %w", name(), err)
		}
		return nil
	})
	return out
}

type intervalJoinOp[Out, A, B, K any] struct {
	opBase
	k1   *keyContext[A, K]
	k2   *keyContext[B, K]
	fn   func(A, B) Out
	cfg  join.IntervalConfig
	ca   codec.Codec[A]
	cb   codec.Codec[B]
	next collector[Out]
	core *join.Interval[A, B]
}

func (o *intervalJoinOp[Out, A, B, K]) Open(ctx *task.OperatorContext) (err error) {
	o.enter()
	defer o.catch(&err)
	if err := o.k1.open(ctx.Keyed); err != nil {
		return err
	}
	if err := o.k2.open(ctx.Keyed); err != nil {
		return err
	}
	core, err := join.NewInterval[A, B](ctx.Keyed, o.cfg, o.ca, o.cb, o)
	o.core = core
	return err
}

func (o *intervalJoinOp[Out, A, B, K]) process1(v A, ts int64, g int) error {
	o.enter()
	o.k1.setKey(v, g)
	return o.check(o.core.ProcessLeft(v, ts))
}

func (o *intervalJoinOp[Out, A, B, K]) process2(v B, ts int64, g int) error {
	o.enter()
	o.k2.setKey(v, g)
	return o.check(o.core.ProcessRight(v, ts))
}

// check names the operator in the core's own errors (an element without
// timestamp, corrupt state); errors from downstream pass as they are.
func (o *intervalJoinOp[Out, A, B, K]) check(err error) error {
	if err == nil {
		return nil
	}
	return o.wrap(err)
}

func (o *intervalJoinOp[Out, A, B, K]) wrap(err error) error {
	var te *task.Error
	if errors.As(err, &te) {
		return err
	}
	return o.fail(err)
}

// Joined implements join.IntervalOutput.
func (o *intervalJoinOp[Out, A, B, K]) Joined(l A, r B, ts int64) error {
	v := o.fn(l, r)
	err := o.next.collect(v, ts)
	o.enter()
	return err
}

// LateLeft implements join.IntervalOutput: late values are dropped, the
// core counts them.
func (o *intervalJoinOp[Out, A, B, K]) LateLeft(A, int64) error { return nil }

// LateRight implements join.IntervalOutput.
func (o *intervalJoinOp[Out, A, B, K]) LateRight(B, int64) error { return nil }

// LateRecordsDropped implements task.LateCounter.
func (o *intervalJoinOp[Out, A, B, K]) LateRecordsDropped() int64 {
	if o.core == nil {
		return 0
	}
	return o.core.LateRecordsDropped()
}

// SnapshotState writes the cleanup timers into the keyed backend, which
// the task snapshots next.
func (o *intervalJoinOp[Out, A, B, K]) SnapshotState(barrier.CheckpointID) error {
	return o.core.Flush()
}

func (o *intervalJoinOp[Out, A, B, K]) ProcessWatermark(wm int64) (_ bool, err error) {
	o.enter()
	defer o.catch(&err)
	if wm <= o.core.Watermark() {
		return true, nil
	}
	return true, o.check(o.core.AdvanceWatermark(wm))
}

func (o *intervalJoinOp[Out, A, B, K]) ProcessWatermarkStatus(eventtime.Status) (bool, error) {
	return true, nil
}

// twoWay is what a window join and a coGroup share while being set up:
// the two streams, their key functions and the key codec.
type twoWay[K, A, B any] struct {
	a      *Stream[A]
	b      *Stream[B]
	ka     func(A) K
	kb     func(B) K
	kc     codec.Codec[K]
	window WindowAssigner
	trig   *WindowTrigger
	late   time.Duration
}

// JoinedStreams is a window join being set up:
// Join[K, Out](a, b).Where(ka).EqualTo(kb).Window(assigner).Apply(fn).
type JoinedStreams[K, Out, A, B any] struct{ w twoWay[K, A, B] }

// Join joins the values of a and b whose keys are equal (Where, EqualTo)
// and that fall in the same window (Flink's DataStream.join): an inner
// join, each pair of a window handed to Apply's function once the window
// fires, with the window's last timestamp. K is the key type and Out the
// result type (Go methods cannot add type parameters, so they are named
// here: Join[string, Result](a, b)). Every window assigner applies
// (tumbling, sliding, session; event or processing time); the window
// operator keeps both sides' values in keyed state.
func Join[K, Out, A, B any](a *Stream[A], b *Stream[B]) *JoinedStreams[K, Out, A, B] {
	return &JoinedStreams[K, Out, A, B]{w: twoWay[K, A, B]{a: a, b: b, kc: defaultCodec[K]()}}
}

// Where sets the key of the first stream's values.
func (j *JoinedStreams[K, Out, A, B]) Where(ka func(A) K) *JoinedStreams[K, Out, A, B] {
	j.w.ka = ka
	return j
}

// EqualTo sets the key of the second stream's values.
func (j *JoinedStreams[K, Out, A, B]) EqualTo(kb func(B) K) *JoinedStreams[K, Out, A, B] {
	j.w.kb = kb
	return j
}

// KeyCodec sets how keys are serialized (default: the built-in codec of
// K; other key types need one).
func (j *JoinedStreams[K, Out, A, B]) KeyCodec(kc codec.Codec[K]) *JoinedStreams[K, Out, A, B] {
	j.w.kc = kc
	return j
}

// Window sets the windows the join pairs values in.
func (j *JoinedStreams[K, Out, A, B]) Window(a WindowAssigner) *JoinWindow[K, Out, A, B] {
	j.w.window = a
	return &JoinWindow[K, Out, A, B]{w: j.w}
}

// JoinWindow is a window join with its windows set.
type JoinWindow[K, Out, A, B any] struct{ w twoWay[K, A, B] }

// Trigger sets when the join's windows fire (default: when the watermark,
// or the clock, passes their end).
func (j *JoinWindow[K, Out, A, B]) Trigger(t WindowTrigger) *JoinWindow[K, Out, A, B] {
	j.w.trig = &t
	return j
}

// AllowedLateness keeps event-time windows for d after their end: a late
// value within d fires its window again, with every pair it is in.
func (j *JoinWindow[K, Out, A, B]) AllowedLateness(d time.Duration) *JoinWindow[K, Out, A, B] {
	j.w.late = d
	return j
}

// Apply returns the stream of fn applied to every pair of a window: each
// first-stream value with each second-stream value of the same key and
// window, in arrival order, when the window fires.
func (j *JoinWindow[K, Out, A, B]) Apply(fn func(a A, b B) Out) *Stream[Out] {
	if fn == nil {
		j.w.a.env.fail(errors.New("weir: window join: nil function"))
	}
	return windowTwoWay(&j.w, "window join", func(_ K, as []A, bs []B, out *Collector[Out]) error {
		for _, a := range as {
			for _, b := range bs {
				out.Emit(fn(a, b))
			}
		}
		return nil
	})
}

// CoGroupedStreams is a coGroup being set up:
// CoGroup[K, Out](a, b).Where(ka).EqualTo(kb).Window(assigner).Apply(fn).
type CoGroupedStreams[K, Out, A, B any] struct{ w twoWay[K, A, B] }

// CoGroup groups the values of a and b by key (Where, EqualTo) and window
// (Flink's DataStream.coGroup): for each key and window with a value on
// either side, Apply's function gets both sides' values (one side may
// have none), with the window's last timestamp as the results'. Type
// parameters as for Join.
func CoGroup[K, Out, A, B any](a *Stream[A], b *Stream[B]) *CoGroupedStreams[K, Out, A, B] {
	return &CoGroupedStreams[K, Out, A, B]{w: twoWay[K, A, B]{a: a, b: b, kc: defaultCodec[K]()}}
}

// Where sets the key of the first stream's values.
func (c *CoGroupedStreams[K, Out, A, B]) Where(ka func(A) K) *CoGroupedStreams[K, Out, A, B] {
	c.w.ka = ka
	return c
}

// EqualTo sets the key of the second stream's values.
func (c *CoGroupedStreams[K, Out, A, B]) EqualTo(kb func(B) K) *CoGroupedStreams[K, Out, A, B] {
	c.w.kb = kb
	return c
}

// KeyCodec sets how keys are serialized (see JoinedStreams.KeyCodec).
func (c *CoGroupedStreams[K, Out, A, B]) KeyCodec(kc codec.Codec[K]) *CoGroupedStreams[K, Out, A, B] {
	c.w.kc = kc
	return c
}

// Window sets the windows the values are grouped in.
func (c *CoGroupedStreams[K, Out, A, B]) Window(a WindowAssigner) *CoGroupWindow[K, Out, A, B] {
	c.w.window = a
	return &CoGroupWindow[K, Out, A, B]{w: c.w}
}

// CoGroupWindow is a coGroup with its windows set.
type CoGroupWindow[K, Out, A, B any] struct{ w twoWay[K, A, B] }

// Trigger sets when the windows fire (see JoinWindow.Trigger).
func (c *CoGroupWindow[K, Out, A, B]) Trigger(t WindowTrigger) *CoGroupWindow[K, Out, A, B] {
	c.w.trig = &t
	return c
}

// AllowedLateness keeps event-time windows for d after their end (see
// JoinWindow.AllowedLateness).
func (c *CoGroupWindow[K, Out, A, B]) AllowedLateness(d time.Duration) *CoGroupWindow[K, Out, A, B] {
	c.w.late = d
	return c
}

// Apply calls fn for every key and window with values: as and bs are the
// window's values of each stream, in arrival order; fn emits any number of
// results through out. An error fails the task.
func (c *CoGroupWindow[K, Out, A, B]) Apply(fn func(key K, as []A, bs []B, out *Collector[Out]) error) *Stream[Out] {
	if fn == nil {
		c.w.a.env.fail(errors.New("weir: coGroup: nil function"))
	}
	return windowTwoWay(&c.w, "coGroup", fn)
}

// either is a value of one of the two streams of a window join, tagged
// with its side, as the united stream carries it.
type either[A, B any] struct {
	first bool
	a     A
	b     B
}

// eitherCodec encodes a tagged value: a byte for the side, then the
// value's encoding.
type eitherCodec[A, B any] struct {
	ca codec.Codec[A]
	cb codec.Codec[B]
}

func (c eitherCodec[A, B]) Append(dst []byte, v either[A, B]) []byte {
	if v.first {
		return c.ca.Append(append(dst, 1), v.a)
	}
	return c.cb.Append(append(dst, 2), v.b)
}

// Identity names both sides' codecs (codec.Identified), so that a window
// join's state restores only under the codecs it was written with.
func (c eitherCodec[A, B]) Identity() codec.Identity {
	return codec.FormatIdentity("either", c.ca, c.cb)
}

func (c eitherCodec[A, B]) Decode(p []byte) (either[A, B], error) {
	if len(p) == 0 {
		return either[A, B]{}, errors.New("weir: a joined value without its side")
	}
	switch p[0] {
	case 1:
		a, err := c.ca.Decode(p[1:])
		return either[A, B]{first: true, a: a}, err
	case 2:
		b, err := c.cb.Decode(p[1:])
		return either[A, B]{b: b}, err
	}
	return either[A, B]{}, fmt.Errorf("weir: a joined value of side %d", p[0])
}

// windowTwoWay builds a window join or coGroup: both streams' values,
// tagged by side, united, keyed by their side's key function and windowed
// by the window operator, whose process function splits each window's
// values by side for fn.
func windowTwoWay[K, Out, A, B any](w *twoWay[K, A, B], name string, fn func(key K, as []A, bs []B, out *Collector[Out]) error) *Stream[Out] {
	env := w.a.env
	switch {
	case w.ka == nil || w.kb == nil:
		env.fail(fmt.Errorf("weir: %s: both key functions are needed (Where and EqualTo)", name))
	case w.kc == nil:
		env.fail(fmt.Errorf("weir: %s: the key type has no built-in codec: call KeyCodec", name))
	}
	var tc codec.Codec[either[A, B]]
	if w.a.codec != nil && w.b.codec != nil {
		tc = eitherCodec[A, B]{ca: w.a.codec, cb: w.b.codec}
	}
	ta := Map(w.a, func(v A) either[A, B] { return either[A, B]{first: true, a: v} }).Name(name + " first").WithCodec(tc)
	tb := Map(w.b, func(v B) either[A, B] { return either[A, B]{b: v} }).Name(name + " second").WithCodec(tc)
	ka, kb := w.ka, w.kb
	ks := KeyBy(Union(ta, tb), func(e either[A, B]) K {
		if e.first {
			return ka(e.a)
		}
		return kb(e.b)
	}, w.kc)
	ws := Window(ks, w.window).AllowedLateness(w.late)
	if w.trig != nil {
		ws = ws.Trigger(*w.trig)
	}
	out := WindowProcess(ws, func(key K, _ TimeWindow, vals []either[A, B], out *Collector[Out]) error {
		var as []A
		var bs []B
		for _, v := range vals {
			if v.first {
				as = append(as, v.a)
			} else {
				bs = append(bs, v.b)
			}
		}
		if name == "window join" && (len(as) == 0 || len(bs) == 0) {
			return nil
		}
		return fn(key, as, bs, out)
	}, defaultCodec[Out]())
	return out.Name(name)
}
