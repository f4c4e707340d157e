package weir

import (
	"fmt"
	"reflect"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/task"
)

// Union returns one stream with the values of all the given streams, of
// the same type (Flink's DataStream.union). Each keeps its own
// partitioning up to the next operator (Rebalance, Broadcast, or forward),
// unless the union's own (Rebalance or Broadcast on the result) overrides
// it; values carry their timestamps when every stream has them. A stream
// may appear more than once: its values then come more than once. The
// union is not an operator: the next operator reads all the streams
// through one input, so Name, UID and Parallelism of a union are errors
// (set them on its inputs or on what consumes it).
func Union[T any](streams ...*Stream[T]) *Stream[T] {
	if len(streams) == 0 {
		panic("weir: Union of no stream") // a bug in the program, like a nil environment
	}
	env := streams[0].env
	u := &Stream[T]{env: env, codec: streams[0].codec, timestamped: true}
	for _, s := range streams {
		if s.env != env {
			env.fail(fmt.Errorf("weir: union: the streams belong to different environments"))
			continue
		}
		u.timestamped = u.timestamped && s.timestamped
		u.union = append(u.union, s.parts()...)
	}
	return u
}

// ConnectedStreams are two streams, possibly of different types, that an
// operator with two inputs reads (CoMap, CoFlatMap, CoProcess): input 1
// reads the first, input 2 the second. Each stream keeps its
// partitioning, and may have another parallelism than the operator.
type ConnectedStreams[A, B any] struct {
	a *Stream[A]
	b *Stream[B]
}

// Connect connects a and b for an operator with two inputs. A stream may
// be connected to itself or to a stream derived from it.
func Connect[A, B any](a *Stream[A], b *Stream[B]) *ConnectedStreams[A, B] {
	if a.env != b.env {
		a.env.fail(fmt.Errorf("weir: connect: the streams belong to different environments"))
	}
	return &ConnectedStreams[A, B]{a: a, b: b}
}

// CoMap returns a stream of f1 applied to every value of the first stream
// and f2 to every value of the second (Flink's CoMapFunction).
func CoMap[A, B, Out any](c *ConnectedStreams[A, B], f1 func(A) Out, f2 func(B) Out) *Stream[Out] {
	return CoFlatMap(c, func(v A, emit func(Out)) { emit(f1(v)) }, func(v B, emit func(Out)) { emit(f2(v)) })
}

// CoFlatMap calls f1 for every value of the first stream and f2 for every
// value of the second; each emits any number of outputs, with the input
// value's timestamp.
func CoFlatMap[A, B, Out any](c *ConnectedStreams[A, B], f1 func(A, func(Out)), f2 func(B, func(Out))) *Stream[Out] {
	if f1 == nil || f2 == nil {
		c.a.env.fail(fmt.Errorf("weir: co-flat-map: nil function"))
	}
	return addTwoInputOp(c.a, c.b, "co-flat-map", nil, nil, func(rc *graph.Subtask, next collector[Out]) (collector[A], collector[B], task.Operator, error) {
		o := &coFlatMapOp[A, B, Out]{opBase: base(rc), f1: f1, f2: f2, next: next}
		o.emit = func(v Out) {
			if o.err == nil {
				o.err = o.next.collect(v, o.ts)
				o.enter()
			}
		}
		return inputFunc[A](func(v A, ts int64, _ int) error { return o.process(func() { o.f1(v, o.emit) }, ts) }),
			inputFunc[B](func(v B, ts int64, _ int) error { return o.process(func() { o.f2(v, o.emit) }, ts) }), o, nil
	})
}

type coFlatMapOp[A, B, Out any] struct {
	opBase
	f1   func(A, func(Out))
	f2   func(B, func(Out))
	next collector[Out]
	emit func(Out)
	ts   int64
	err  error
}

// process runs call, one input's function on a value with timestamp ts,
// and returns the first error of what it emitted.
func (o *coFlatMapOp[A, B, Out]) process(call func(), ts int64) error {
	o.enter()
	o.ts = ts
	call()
	err := o.err
	o.err = nil
	return err
}

// CoProcessFunction processes the values of two connected streams (Flink's
// CoProcessFunction), with operator state and processing-time timers
// through the RuntimeContext it gets at Open: ctx.Timers() registers
// processing-time timers, which fire OnTimer if the function implements
// ProcessingTimerFunction; OperatorListState keeps state that checkpoints
// and restores (and is redistributed at another parallelism). Both
// methods run in the task's goroutine, never concurrently.
type CoProcessFunction[A, B, Out any] interface {
	Open(ctx *RuntimeContext) error
	ProcessElement1(v A, out *Collector[Out]) error
	ProcessElement2(v B, out *Collector[Out]) error
}

// ProcessingTimerFunction is implemented by a CoProcessFunction (or
// BroadcastProcessFunction) that registers processing-time timers: OnTimer
// is called when the clock reaches ts.
type ProcessingTimerFunction[Out any] interface {
	OnTimer(ts int64, out *Collector[Out]) error
}

// CoProcess applies a CoProcessFunction to the connected streams. newFn is
// called once per subtask (and again after a restart).
func CoProcess[A, B, Out any](c *ConnectedStreams[A, B], newFn func() CoProcessFunction[A, B, Out]) *Stream[Out] {
	out := addTwoInputOp(c.a, c.b, "co-process", nil, nil, func(rc *graph.Subtask, next collector[Out]) (collector[A], collector[B], task.Operator, error) {
		fn := newFn()
		o := &coProcessOp[A, B, Out]{opBase: base(rc), fn: fn, out: &Collector[Out]{next: next}}
		o.out.owner = &o.opBase
		o.onTimer, _ = fn.(ProcessingTimerFunction[Out])
		o.sides = newSideCollectors(rc)
		o.sides.owner = &o.opBase
		return inputFunc[A](o.process1), inputFunc[B](o.process2), o, nil
	})
	out.process = true
	out.n.Stateful = true // operator state
	return out
}

type coProcessOp[A, B, Out any] struct {
	opBase
	fn      CoProcessFunction[A, B, Out]
	onTimer ProcessingTimerFunction[Out]
	out     *Collector[Out]
	rc      *RuntimeContext
	timers  *operatorTimers
	sides   *sideCollectors
	wm      int64
}

func (o *coProcessOp[A, B, Out]) Open(ctx *task.OperatorContext) (err error) {
	o.enter()
	defer o.catch(&err)
	timers, err := newOperatorTimers(ctx)
	if err != nil {
		return err
	}
	o.timers, o.wm = timers, eventtime.MinWatermark
	o.rc = &RuntimeContext{Subtask: ctx.Subtask, Parallelism: ctx.Parallelism, operator: ctx.OperatorState,
		timers: &TimerService{op: timers, ctx: ctx, wm: &o.wm}, ts: eventtime.NoTimestamp, sides: o.sides}
	return o.fn.Open(o.rc)
}

func (o *coProcessOp[A, B, Out]) process1(v A, ts int64, _ int) error {
	o.enter()
	o.out.ts, o.rc.ts = ts, ts
	return done(&o.opBase, o.out, o.rc, o.fn.ProcessElement1(v, o.out))
}

func (o *coProcessOp[A, B, Out]) process2(v B, ts int64, _ int) error {
	o.enter()
	o.out.ts, o.rc.ts = ts, ts
	return done(&o.opBase, o.out, o.rc, o.fn.ProcessElement2(v, o.out))
}

func (o *coProcessOp[A, B, Out]) SnapshotState(barrier.CheckpointID) error {
	return o.timers.snapshot()
}

func (o *coProcessOp[A, B, Out]) ProcessWatermark(wm int64) (bool, error) {
	o.wm = wm
	return true, nil
}

func (o *coProcessOp[A, B, Out]) ProcessWatermarkStatus(eventtime.Status) (bool, error) {
	return true, nil
}

func (o *coProcessOp[A, B, Out]) OnProcessingTime(now int64) (err error) {
	o.enter()
	defer o.catch(&err)
	return o.timers.advance(now, func(ts int64) error {
		if o.onTimer == nil {
			return o.fail(fmt.Errorf("a processing-time timer fired, but the co-process function has no OnTimer (implement weir.ProcessingTimerFunction)"))
		}
		o.out.ts, o.rc.ts = eventtime.NoTimestamp, ts
		return done(&o.opBase, o.out, o.rc, o.onTimer.OnTimer(ts, o.out))
	})
}

// ConnectedKeyedStreams are two keyed streams with the same key type
// connected for a keyed operator with two inputs (KeyedCoProcess): the
// values of both with the same key reach the same subtask, and share its
// keyed state and timers.
type ConnectedKeyedStreams[A, B, K any] struct {
	a *KeyedStream[A, K]
	b *KeyedStream[B, K]
}

// ConnectKeyed connects two keyed streams. Their keys must have the same
// type (the compiler checks) and key codecs of the same type, so that
// equal keys hash to the same subtask from both sides: Execute fails,
// naming the operator, when the codecs' types differ.
func ConnectKeyed[A, B, K any](a *KeyedStream[A, K], b *KeyedStream[B, K]) *ConnectedKeyedStreams[A, B, K] {
	if a.s.env != b.s.env {
		a.s.env.fail(fmt.Errorf("weir: connect: the streams belong to different environments"))
	}
	return &ConnectedKeyedStreams[A, B, K]{a: a, b: b}
}

// KeyedCoProcessFunction processes the values of two connected keyed
// streams (Flink's KeyedCoProcessFunction). Both methods see the keyed
// state of the value's key, shared by both inputs, and may register
// event-time and processing-time timers for it through ctx.Timers() (the
// RuntimeContext of Open); the function implements TimerFunction to
// receive them. The operator's event time is the minimum of its two
// inputs' watermarks (an idle input does not hold it back).
type KeyedCoProcessFunction[K, A, B, Out any] interface {
	Open(ctx *RuntimeContext) error
	ProcessElement1(key K, v A, out *Collector[Out]) error
	ProcessElement2(key K, v B, out *Collector[Out]) error
}

// KeyedCoProcess applies a KeyedCoProcessFunction to the connected keyed
// streams. newFn is called once per subtask (and again after a restart).
func KeyedCoProcess[K, A, B, Out any](c *ConnectedKeyedStreams[A, B, K], newFn func() KeyedCoProcessFunction[K, A, B, Out]) *Stream[Out] {
	out := addKeyedTwoInputOp(c.a, c.b, "keyed co-process", func(rc *graph.Subtask, k1 *keyContext[A, K], k2 *keyContext[B, K], next collector[Out]) (collector[A], collector[B], task.Operator, error) {
		o := &keyedCoProcessOp[K, A, B, Out]{opBase: base(rc), k1: k1, k2: k2, fn: newFn(), out: &Collector[Out]{next: next}, sides: newSideCollectors(rc)}
		o.out.owner, o.sides.owner = &o.opBase, &o.opBase
		return inputFunc[A](o.process1), inputFunc[B](o.process2), o, nil
	})
	out.process = true
	return out
}

type keyedCoProcessOp[K, A, B, Out any] struct {
	opBase
	k1     *keyContext[A, K]
	k2     *keyContext[B, K]
	fn     KeyedCoProcessFunction[K, A, B, Out]
	out    *Collector[Out]
	rc     *RuntimeContext
	timers *eventtime.TimerService
	firing keyedTimers[K, Out]
	sides  *sideCollectors
}

func (o *keyedCoProcessOp[K, A, B, Out]) Open(ctx *task.OperatorContext) (err error) {
	o.enter()
	defer o.catch(&err)
	if err := o.k1.open(ctx.Keyed); err != nil {
		return err
	}
	if err := o.k2.open(ctx.Keyed); err != nil {
		return err
	}
	svc, err := eventtime.NewTimerService(ctx.Keyed, "co-process")
	if err != nil {
		return err
	}
	o.timers = svc
	o.rc = &RuntimeContext{Subtask: ctx.Subtask, Parallelism: ctx.Parallelism, keyed: ctx.Keyed, operator: ctx.OperatorState,
		timers: &TimerService{svc: svc, ctx: ctx}, ts: eventtime.NoTimestamp, sides: o.sides}
	o.firing = newKeyedTimers(&o.opBase, "keyed co-process function", o.fn, o.k1.kc, func(k K) { o.k1.key, o.k2.key = k, k }, o.out, o.rc, svc)
	return o.firing.open(o.fn.Open(o.rc))
}

func (o *keyedCoProcessOp[K, A, B, Out]) process1(v A, ts int64, g int) error {
	o.enter()
	if err := o.k1.setKey(v, g); err != nil {
		return err
	}
	o.out.ts, o.rc.ts = ts, ts
	return done(&o.opBase, o.out, o.rc, o.fn.ProcessElement1(o.k1.key, v, o.out))
}

func (o *keyedCoProcessOp[K, A, B, Out]) process2(v B, ts int64, g int) error {
	o.enter()
	if err := o.k2.setKey(v, g); err != nil {
		return err
	}
	o.out.ts, o.rc.ts = ts, ts
	return done(&o.opBase, o.out, o.rc, o.fn.ProcessElement2(o.k2.key, v, o.out))
}

// SnapshotState writes the timers into the keyed backend, which the task
// snapshots next.
func (o *keyedCoProcessOp[K, A, B, Out]) SnapshotState(barrier.CheckpointID) error {
	return o.timers.Flush()
}

func (o *keyedCoProcessOp[K, A, B, Out]) ProcessWatermark(wm int64) (_ bool, err error) {
	o.enter()
	defer o.catch(&err)
	return true, o.firing.advanceWatermark(wm)
}

func (o *keyedCoProcessOp[K, A, B, Out]) ProcessWatermarkStatus(eventtime.Status) (bool, error) {
	return true, nil
}

func (o *keyedCoProcessOp[K, A, B, Out]) OnProcessingTime(now int64) (err error) {
	o.enter()
	defer o.catch(&err)
	return o.firing.advanceProcessingTime(now)
}

// inputFunc adapts a function to the collector of one input of a
// two-input operator: g is the value's key group (-1: the operator
// computes it), as a keyed edge's decoder hands it over.
type inputFunc[T any] func(v T, ts int64, g int) error

func (f inputFunc[T]) collect(v T, ts int64) error { return f(v, ts, -1) }

func (f inputFunc[T]) collectInGroup(v T, ts int64, g int) error { return f(v, ts, g) }

// addTwoInputOp adds an operator with two inputs: input 0 reads a, input
// 1 reads b. With key hashers both inputs are keyed (hash-partitioned by
// them) and so is the operator. build makes one subtask's operator and
// the collectors of its two inputs.
func addTwoInputOp[A, B, Out any](a *Stream[A], b *Stream[B], name string, hashA func() func(A) uint64, hashB func() func(B) uint64,
	build func(rc *graph.Subtask, next collector[Out]) (collector[A], collector[B], task.Operator, error)) *Stream[Out] {
	env := a.env
	n := env.addNode(&graph.Node{Name: name, Keyed: hashA != nil, NumInputs: 2})
	connectInput(a, n, 0, hashA)
	connectInput(b, n, 1, hashB)
	n.Instantiate = func(rc *graph.Subtask, out any) (any, task.Operator, error) {
		next, _ := out.(collector[Out])
		if next == nil {
			next = discard[Out]{}
		}
		in1, in2, op, err := build(rc, next)
		if err != nil {
			return nil, nil, err
		}
		return []any{in1, in2}, op, nil
	}
	out := newStream[Out](env, n)
	out.timestamped = a.timestamped && b.timestamped
	return out
}

// addKeyedTwoInputOp adds a keyed operator with two inputs reading the
// keyed streams a (input 0) and b (input 1), whose key codecs Execute
// checks for agreement. build gets a key context per input, both over the
// operator's one keyed backend once its Open binds them.
func addKeyedTwoInputOp[A, B, K, Out any](a *KeyedStream[A, K], b *KeyedStream[B, K], name string,
	build func(rc *graph.Subtask, k1 *keyContext[A, K], k2 *keyContext[B, K], next collector[Out]) (collector[A], collector[B], task.Operator, error)) *Stream[Out] {
	var out *Stream[Out]
	out = addTwoInputOp(a.s, b.s, name, a.keyHasher, b.keyHasher, func(rc *graph.Subtask, next collector[Out]) (collector[A], collector[B], task.Operator, error) {
		k1 := &keyContext[A, K]{fn: a.fn, kc: a.kc, hash: codec.HashFunc(a.kc), maxPar: rc.MaxParallelism}
		k2 := &keyContext[B, K]{fn: b.fn, kc: b.kc, hash: codec.HashFunc(b.kc), maxPar: rc.MaxParallelism}
		return build(rc, k1, k2, next)
	})
	n := out.n
	a.s.env.check(func() error { return sameKeyCodecs(n.Name, a.kc, b.kc) })
	return out
}

// sameKeyCodecs reports an error naming operator op unless both inputs
// encode keys with codecs of the same type (and, for comparable non-pointer
// codecs, equal values): only then do equal keys of both inputs reach the
// same subtask and the same keyed state.
func sameKeyCodecs[K any](op string, c1, c2 codec.Codec[K]) error {
	if c1 == nil || c2 == nil {
		return fmt.Errorf("weir: operator %s: a keyed input without a key codec", op)
	}
	t1, t2 := reflect.TypeOf(c1), reflect.TypeOf(c2)
	if t1 != t2 {
		return fmt.Errorf("weir: operator %s: the inputs' keys are encoded differently (%v and %v): equal keys would not meet; KeyBy both with the same key codec", op, t1, t2)
	}
	if t1.Comparable() && t1.Kind() != reflect.Pointer && !equalValues(c1, c2) {
		return fmt.Errorf("weir: operator %s: the inputs' key codecs differ (%v): equal keys would not meet; KeyBy both with the same key codec", op, t1)
	}
	return nil
}

// equalValues reports whether a == b, false where comparing them panics
// (a comparable struct holding an incomparable value).
func equalValues(a, b any) (eq bool) {
	defer func() {
		if recover() != nil {
			eq = false
		}
	}()
	return a == b
}
