package weir

import (
	"errors"
	"fmt"
	"iter"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/eventtime/join"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
	"github.com/weirstream/weir/task"
)

// KeyedStream is a stream partitioned by key: every value with the same key
// goes to the same subtask, whose keyed state is scoped to that key.
type KeyedStream[T any, K any] struct {
	s  *Stream[T]
	fn func(T) K
	kc codec.Codec[K]
}

// KeyBy partitions s by key(v). kc serializes keys: keys are hashed and
// stored in state in their encoded form, so equal keys must encode to
// equal bytes. key must be a function of its value: it runs on the
// producer to route a value and on the consumer to scope its state, and
// on the pebble backend once more where the consumer reads a buffer's
// state ahead of its records.
func KeyBy[T any, K any](s *Stream[T], key func(T) K, kc codec.Codec[K]) *KeyedStream[T, K] {
	return &KeyedStream[T, K]{s: s, fn: key, kc: kc}
}

// keyHasher returns a function hashing a value's encoded key (without
// encoding it, for the codecs that are a codec.Hasher). Each call returns
// a function with its own scratch buffer (one per goroutine).
func (ks *KeyedStream[T, K]) keyHasher() func(T) uint64 {
	fn, hash := ks.fn, codec.HashFunc(ks.kc)
	return func(v T) uint64 { return hash(fn(v)) }
}

// keyedOp adds a keyed operator consuming ks.
func keyedOp[T, K, Out any](ks *KeyedStream[T, K], name string, build func(rc *graph.Subtask, kc *keyContext[T, K], next collector[Out]) (collector[T], task.Operator, error)) *Stream[Out] {
	s := ks.s
	n := s.env.addNode(&graph.Node{Name: name, Keyed: true})
	connectInput(s, n, 0, ks.keyHasher)
	n.Instantiate = func(rc *graph.Subtask, out any) (any, task.Operator, error) {
		next, _ := out.(collector[Out])
		if next == nil {
			next = discard[Out]{}
		}
		kc := &keyContext[T, K]{fn: ks.fn, kc: ks.kc, hash: codec.HashFunc(ks.kc), maxPar: rc.MaxParallelism}
		return build(rc, kc, next)
	}
	out := newStream[Out](s.env, n)
	out.timestamped = s.timestamped
	return out
}

// keyContext sets the current key of a keyed backend from a value.
type keyContext[T, K any] struct {
	fn      func(T) K
	kc      codec.Codec[K]
	hash    func(K) uint64 // codec.Hash64 of the encoded key
	maxPar  int
	backend state.KeyedBackend
	// set sets the backend's current key by value (heap.KeySetter), nil
	// when keys go to the backend serialized.
	set func(K, int) error
	buf []byte
	key K

	// pf is the backend if it prefetches (a cache over disk), nil
	// otherwise; pfBuf, pfEnds and pfKeys hold the keys of the buffer
	// being prefetched, pfGroups their key groups.
	pf       statePrefetcher
	enter    func() // marks the operator running (opBase.enter), or nil
	pfBuf    []byte
	pfEnds   []int
	pfKeys   [][]byte
	pfGroups []int
}

// statePrefetcher is a keyed backend that can read the state of a
// buffer's keys in one pass ahead of their records (pebble's).
type statePrefetcher interface {
	PrefetchWanted() bool
	Prefetch(keys [][]byte, groups []int) error
}

// keyPrefetch is a keyed operator's side of a prefetch: the decoding head
// of its task hands it the values of a buffer's records (with their key
// groups where the records carry them, -1 otherwise), then has it read
// their keys' state. prefetchWanted, when true, marks the operator
// running: a panic of its key selector names it.
type keyPrefetch[T any] interface {
	prefetchWanted() bool
	addPrefetch(v T, group int)
	prefetch() error
}

// prefetchingInput is a keyed operator's collector that prefetches.
type prefetchingInput[T any] interface {
	keyPrefetcher() keyPrefetch[T]
}

// prefetcherOf returns the prefetch side of the collector in, nil if it
// has none.
func prefetcherOf[T any](in any) keyPrefetch[T] {
	if p, ok := in.(prefetchingInput[T]); ok {
		return p.keyPrefetcher()
	}
	return nil
}

// recordDecoder is a task's decoding head as a prefetch sees it.
type recordDecoder[T any] interface {
	// decodeKeyed returns a record's value and key group (-1: unknown),
	// false for a record it cannot decode.
	decodeKeyed(rec []byte) (v T, group int, ok bool)
}

// prefetchRecords hands the values of records, as d decodes them, to pk
// and has it prefetch their state, when the backend wants it. Where d
// cannot decode a record, prefetching stops: the record fails when it is
// processed.
func prefetchRecords[T any](pk keyPrefetch[T], records iter.Seq[[]byte], d recordDecoder[T]) error {
	if pk == nil || !pk.prefetchWanted() {
		return nil
	}
	for rec := range records {
		v, g, ok := d.decodeKeyed(rec)
		if !ok {
			break
		}
		pk.addPrefetch(v, g)
	}
	return pk.prefetch()
}

func (c *keyContext[T, K]) prefetchWanted() bool {
	if c.pf == nil || !c.pf.PrefetchWanted() {
		return false
	}
	if c.enter != nil {
		c.enter()
	}
	return true
}

// addPrefetch adds v's key to the keys to prefetch. The key selector runs
// again when the record is processed: as for routing, it must be a
// function of the value.
func (c *keyContext[T, K]) addPrefetch(v T, g int) {
	k := c.fn(v)
	if g < 0 {
		g = keygroup.ForHash(c.hash(k), c.maxPar)
	}
	c.pfBuf = c.kc.Append(c.pfBuf, k)
	c.pfEnds = append(c.pfEnds, len(c.pfBuf))
	c.pfGroups = append(c.pfGroups, g)
}

// prefetch reads the state of the keys added since the last call.
func (c *keyContext[T, K]) prefetch() error {
	c.pfKeys = c.pfKeys[:0]
	start := 0
	for _, end := range c.pfEnds {
		c.pfKeys = append(c.pfKeys, c.pfBuf[start:end:end])
		start = end
	}
	err := c.pf.Prefetch(c.pfKeys, c.pfGroups)
	c.pfBuf, c.pfEnds, c.pfGroups = c.pfBuf[:0], c.pfEnds[:0], c.pfGroups[:0]
	return err
}

// open binds c to the operator's keyed backend.
func (c *keyContext[T, K]) open(b state.KeyedBackend) error {
	c.backend = b
	if err := state.RegisterKeyCodec(b, c.kc); err != nil {
		return err
	}
	set, err := heap.KeySetter(b, c.kc)
	c.set = set
	if set == nil {
		c.pf, _ = b.(statePrefetcher)
	}
	return err
}

// setKey sets the current key to v's. g is the key's key group, or -1
// to compute it here (from a record of a keyed edge the producer did).
// A key group outside the backend's range (a key that hashes elsewhere
// than the producer routed it) fails with a *state.KeyGroupError.
func (c *keyContext[T, K]) setKey(v T, g int) error {
	c.key = c.fn(v)
	if g < 0 {
		g = keygroup.ForHash(c.hash(c.key), c.maxPar)
	}
	if c.set != nil {
		return c.set(c.key, g)
	}
	c.buf = c.kc.Append(c.buf[:0], c.key)
	return c.backend.SetCurrentKey(c.buf, g)
}

// Reduce folds every value of a key into the key's running result with fn
// and emits the updated result for each value (a running aggregate).
func Reduce[T, K any](ks *KeyedStream[T, K], fn func(acc, v T) T) *Stream[T] {
	out := keyedOp(ks, "reduce", func(rc *graph.Subtask, kc *keyContext[T, K], next collector[T]) (collector[T], task.Operator, error) {
		o := &reduceOp[T, K]{opBase: base(rc), kc: kc, fn: fn, next: next, codec: ks.s.codec}
		return o, o, nil
	})
	out.codec = ks.s.codec
	return out
}

type reduceOp[T, K any] struct {
	opBase
	kc    *keyContext[T, K]
	fn    func(acc, v T) T
	next  collector[T]
	codec codec.Codec[T]
	st    *state.ReducingState[T]
}

func (o *reduceOp[T, K]) Open(ctx *task.OperatorContext) error {
	o.kc.enter = o.enter
	if err := o.kc.open(ctx.Keyed); err != nil {
		return err
	}
	st, err := state.GetReducingState(ctx.Keyed, state.ReducingDescriptor[T]{Name: "reduce", Codec: o.codec, Reduce: o.fn})
	o.st = st
	return err
}

func (o *reduceOp[T, K]) collect(v T, ts int64) error { return o.collectInGroup(v, ts, -1) }

func (o *reduceOp[T, K]) keyPrefetcher() keyPrefetch[T] { return o.kc }

func (o *reduceOp[T, K]) collectInGroup(v T, ts int64, g int) error {
	o.enter()
	if err := o.kc.setKey(v, g); err != nil {
		return err
	}
	r, err := o.st.AddAndGet(v)
	if err != nil {
		return err
	}
	return o.next.collect(r, ts)
}

// KeyedProcessFunction processes the values of a keyed stream one by one,
// with keyed state scoped to the current key.
type KeyedProcessFunction[K, In, Out any] interface {
	// Open is called once per subtask before any value: get state here.
	Open(ctx *RuntimeContext) error
	// ProcessElement handles one value of key; it emits through out.
	ProcessElement(key K, v In, out *Collector[Out]) error
}

// ProcessFunc adapts a function (with an open function, may be nil) to a
// KeyedProcessFunction.
func ProcessFunc[K, In, Out any](open func(*RuntimeContext) error, fn func(key K, v In, out *Collector[Out]) error) KeyedProcessFunction[K, In, Out] {
	return processFunc[K, In, Out]{open: open, fn: fn}
}

type processFunc[K, In, Out any] struct {
	open func(*RuntimeContext) error
	fn   func(K, In, *Collector[Out]) error
}

func (p processFunc[K, In, Out]) Open(ctx *RuntimeContext) error {
	if p.open == nil {
		return nil
	}
	return p.open(ctx)
}

func (p processFunc[K, In, Out]) ProcessElement(key K, v In, out *Collector[Out]) error {
	return p.fn(key, v, out)
}

// Collector receives a function's outputs.
type Collector[T any] struct {
	next  collector[T]
	ts    int64 // the timestamp of what Emit sends
	err   error
	owner *opBase // marked running again when Emit returns (nil: none)
}

// Emit sends v downstream, with the event timestamp of the value being
// processed (of the timer, in OnTimer).
func (c *Collector[T]) Emit(v T) {
	if c.err == nil {
		c.err = c.next.collect(v, c.ts)
		if c.owner != nil {
			c.owner.enter()
		}
	}
}

// RuntimeContext gives a user function its subtask, its state and, for
// process functions, its timers and side outputs.
type RuntimeContext struct {
	Subtask     int
	Parallelism int
	keyed       state.KeyedBackend
	operator    *state.OperatorBackend
	timers      *TimerService
	ts          int64 // of the value being processed, or the firing timer
	sides       *sideCollectors
	broadcast   *broadcastContext // a broadcast process function's states
	// err is the first error of what the function emitted to side
	// outputs (Output) in the current call; the operator returns it.
	err error
}

// Timestamp returns the event timestamp of the value being processed, or
// of the timer firing in OnTimer (eventtime.NoTimestamp when the stream
// has none).
func (c *RuntimeContext) Timestamp() int64 { return c.ts }

// Timers returns the timer service of a process function: timers a keyed
// one registers fire OnTimer (see TimerFunction) for the current key; a
// CoProcessFunction's are processing-time timers of its subtask
// (ProcessingTimerFunction). Nil for other functions.
func (c *RuntimeContext) Timers() *TimerService { return c.timers }

// TimeDomain says which clock a timer follows.
type TimeDomain uint8

const (
	// EventTime timers fire when the watermark reaches them.
	EventTime TimeDomain = iota
	// ProcessingTime timers fire when the clock reaches them.
	ProcessingTime
)

func (d TimeDomain) String() string {
	if d == ProcessingTime {
		return "processing time"
	}
	return "event time"
}

// TimerFunction is implemented by a KeyedProcessFunction that uses timers.
// OnTimer is called when a timer of key fires, in the task's goroutine,
// never concurrently with ProcessElement, with the keyed state scoped to
// key: event-time timers when the watermark reaches ts (before the
// watermark goes downstream), processing-time timers when the clock does.
// What it emits has timestamp ts for event-time timers.
type TimerFunction[K, Out any] interface {
	OnTimer(key K, ts int64, domain TimeDomain, out *Collector[Out]) error
}

// TimerService registers timers for the current key of a keyed process
// function (Flink's TimerService). One timer per key and timestamp and
// domain: registering it again does nothing. Timers are keyed state:
// checkpointed and restored with the key, also at another parallelism;
// processing-time timers that came due while the job was down fire on
// restore.
type TimerService struct {
	svc *eventtime.TimerService // keyed timers; nil for a non-keyed function
	op  *operatorTimers         // a non-keyed function's processing-time timers
	wm  *int64                  // a non-keyed operator's event time
	ctx *task.OperatorContext
	// noKey, if set, reports that the function has no current key now
	// (a keyed broadcast process function's broadcast side).
	noKey func() bool
}

// check returns why timers cannot be set now, if they cannot.
func (t *TimerService) check() error {
	if t.noKey != nil && t.noKey() {
		return ErrNoCurrentKey
	}
	return nil
}

// ErrNoCurrentKey is returned by a TimerService used on the broadcast side
// of a keyed broadcast process function: a broadcast value belongs to no
// key.
var ErrNoCurrentKey = join.ErrNoCurrentKey

// ErrEventTimeTimerNotKeyed is returned by the event-time methods of a
// non-keyed function's TimerService: event-time timers belong to a key
// (KeyBy the inputs and use KeyedCoProcess or KeyedBroadcastProcess).
var ErrEventTimeTimerNotKeyed = errors.New("weir: event-time timers need a keyed stream")

// RegisterEventTimeTimer sets a timer that fires when the watermark
// reaches ts.
func (t *TimerService) RegisterEventTimeTimer(ts int64) error {
	if t.svc == nil {
		return ErrEventTimeTimerNotKeyed
	}
	if err := t.check(); err != nil {
		return err
	}
	return t.svc.RegisterEventTimeTimer(ts, nil)
}

// DeleteEventTimeTimer removes an event-time timer (missing: no error).
func (t *TimerService) DeleteEventTimeTimer(ts int64) error {
	if t.svc == nil {
		return ErrEventTimeTimerNotKeyed
	}
	if err := t.check(); err != nil {
		return err
	}
	return t.svc.DeleteEventTimeTimer(ts, nil)
}

// RegisterProcessingTimeTimer sets a timer that fires when the clock (unix
// ms) reaches ts.
func (t *TimerService) RegisterProcessingTimeTimer(ts int64) error {
	if err := t.check(); err != nil {
		return err
	}
	if t.svc == nil {
		t.op.add(ts)
	} else if err := t.svc.RegisterProcessingTimeTimer(ts, nil); err != nil {
		return err
	}
	t.ctx.RequestProcessingTime(ts)
	return nil
}

// DeleteProcessingTimeTimer removes a processing-time timer (missing: no
// error).
func (t *TimerService) DeleteProcessingTimeTimer(ts int64) error {
	if err := t.check(); err != nil {
		return err
	}
	if t.svc == nil {
		t.op.remove(ts)
		return nil
	}
	return t.svc.DeleteProcessingTimeTimer(ts, nil)
}

// CurrentWatermark returns the operator's event time: the last watermark
// it received (math.MinInt64 before the first).
func (t *TimerService) CurrentWatermark() int64 {
	if t.svc == nil {
		return *t.wm
	}
	return t.svc.CurrentWatermark()
}

// CurrentProcessingTime returns the clock, unix ms.
func (t *TimerService) CurrentProcessingTime() int64 { return t.ctx.ProcessingTime() }

// KeyedBackend is the subtask's keyed state backend, for use with the
// state package's typed states (state.GetValueState, …).
func (c *RuntimeContext) KeyedBackend() state.KeyedBackend { return c.keyed }

// ValueState returns the keyed value state called name.
func ValueState[T any](c *RuntimeContext, name string, vc codec.Codec[T]) (*state.ValueState[T], error) {
	return state.GetValueState(c.keyed, state.ValueDescriptor[T]{Name: name, Codec: vc})
}

// ListState returns the keyed list state called name.
func ListState[T any](c *RuntimeContext, name string, vc codec.Codec[T]) (*state.ListState[T], error) {
	return state.GetListState(c.keyed, state.ListDescriptor[T]{Name: name, Codec: vc})
}

// OperatorListState returns the operator (non-keyed) list state called
// name of the function's subtask: it is checkpointed with the subtask and,
// restored at another parallelism, the elements of all old subtasks are
// split evenly among the new ones (Flink's ListState of an operator).
func OperatorListState[T any](c *RuntimeContext, name string, vc codec.Codec[T]) (*state.OperatorListState[T], error) {
	if c.operator == nil {
		return nil, errors.New("weir: operator state outside an operator")
	}
	return state.GetOperatorListState(c.operator, state.ListDescriptor[T]{Name: name, Codec: vc}, state.SplitDistribute)
}

// MapState returns the keyed map state called name.
func MapState[UK, V any](c *RuntimeContext, name string, kc codec.Codec[UK], vc codec.Codec[V]) (*state.MapState[UK, V], error) {
	return state.GetMapState(c.keyed, state.MapDescriptor[UK, V]{Name: name, KeyCodec: kc, ValueCodec: vc})
}

// Process applies a KeyedProcessFunction to every value of ks, with keyed
// state. newFn is called once per subtask (and again after a restart), so
// each subtask has its own function value.
func Process[K, In, Out any](ks *KeyedStream[In, K], newFn func() KeyedProcessFunction[K, In, Out]) *Stream[Out] {
	out := keyedOp(ks, "process", func(rc *graph.Subtask, kc *keyContext[In, K], next collector[Out]) (collector[In], task.Operator, error) {
		o := &processOp[K, In, Out]{opBase: base(rc), kc: kc, fn: newFn(), out: &Collector[Out]{next: next}, sides: newSideCollectors(rc)}
		o.out.owner, o.sides.owner = &o.opBase, &o.opBase
		return o, o, nil
	})
	out.process = true
	return out
}

type processOp[K, In, Out any] struct {
	opBase
	kc     *keyContext[In, K]
	fn     KeyedProcessFunction[K, In, Out]
	out    *Collector[Out]
	rc     *RuntimeContext
	timers *eventtime.TimerService
	firing keyedTimers[K, Out]
	sides  *sideCollectors
}

func (o *processOp[K, In, Out]) Open(ctx *task.OperatorContext) (err error) {
	o.enter()
	defer o.catch(&err)
	o.kc.enter = o.enter
	if err := o.kc.open(ctx.Keyed); err != nil {
		return err
	}
	svc, err := eventtime.NewTimerService(ctx.Keyed, "process")
	if err != nil {
		return err
	}
	o.timers = svc
	o.rc = &RuntimeContext{Subtask: ctx.Subtask, Parallelism: ctx.Parallelism, keyed: ctx.Keyed, operator: ctx.OperatorState,
		timers: &TimerService{svc: svc, ctx: ctx}, ts: eventtime.NoTimestamp, sides: o.sides}
	o.firing = newKeyedTimers(&o.opBase, "process function", o.fn, o.kc.kc, func(k K) { o.kc.key = k }, o.out, o.rc, svc)
	return o.firing.open(o.fn.Open(o.rc))
}

func (o *processOp[K, In, Out]) collect(v In, ts int64) error { return o.collectInGroup(v, ts, -1) }

func (o *processOp[K, In, Out]) keyPrefetcher() keyPrefetch[In] { return o.kc }

func (o *processOp[K, In, Out]) collectInGroup(v In, ts int64, g int) (err error) {
	o.enter()
	if err := o.kc.setKey(v, g); err != nil {
		return err
	}
	o.out.ts, o.rc.ts = ts, ts
	return done(&o.opBase, o.out, o.rc, o.fn.ProcessElement(o.kc.key, v, o.out))
}

// SnapshotState writes the timers into the keyed backend, which the task
// snapshots next.
func (o *processOp[K, In, Out]) SnapshotState(barrier.CheckpointID) error { return o.timers.Flush() }

func (o *processOp[K, In, Out]) ProcessWatermark(wm int64) (_ bool, err error) {
	o.enter()
	defer o.catch(&err)
	return true, o.firing.advanceWatermark(wm)
}

func (o *processOp[K, In, Out]) ProcessWatermarkStatus(eventtime.Status) (bool, error) {
	return true, nil
}

func (o *processOp[K, In, Out]) OnProcessingTime(now int64) (err error) {
	o.enter()
	defer o.catch(&err)
	return o.firing.advanceProcessingTime(now)
}

// done returns what a call of a user function (with collector out and
// context rc) ended with: its error (named for o), or the first error of
// what it emitted.
func done[Out any](o *opBase, out *Collector[Out], rc *RuntimeContext, err error) error {
	if err != nil {
		out.err, rc.err = nil, nil
		return o.fail(err)
	}
	err = out.err
	if err == nil {
		err = rc.err
	}
	out.err, rc.err = nil, nil
	return err
}

// keyedTimers fire the timers of a keyed process operator (Process,
// KeyedCoProcess, KeyedBroadcastProcess): OnTimer of its function, with the
// keyed state scoped to the timer's key.
type keyedTimers[K, Out any] struct {
	op      *opBase
	what    string // the function's kind, for errors
	onTimer TimerFunction[K, Out]
	kc      codec.Codec[K]
	setKey  func(K) // sets the operator's typed current key
	out     *Collector[Out]
	rc      *RuntimeContext
	svc     *eventtime.TimerService
	// before, if set, runs before each OnTimer.
	before func()
	// The firing functions, made once.
	eventTime, processingTime eventtime.TimerFunc
}

func newKeyedTimers[K, Out any](op *opBase, what string, fn any, kc codec.Codec[K], setKey func(K), out *Collector[Out], rc *RuntimeContext,
	svc *eventtime.TimerService) keyedTimers[K, Out] {
	f := keyedTimers[K, Out]{op: op, what: what, kc: kc, setKey: setKey, out: out, rc: rc, svc: svc}
	f.onTimer, _ = fn.(TimerFunction[K, Out])
	return f
}

// open finishes the operator's Open, after its function's Open returned
// err: the processing-time timers restored from a checkpoint, due or not,
// ask for their callback.
func (f *keyedTimers[K, Out]) open(err error) error {
	if err != nil {
		return err
	}
	f.eventTime = func(t eventtime.Timer) error { return f.fire(t, EventTime, t.Timestamp) }
	f.processingTime = func(t eventtime.Timer) error { return f.fire(t, ProcessingTime, eventtime.NoTimestamp) }
	if t, ok := f.svc.NextProcessingTime(); ok {
		f.rc.timers.ctx.RequestProcessingTime(t)
	}
	return nil
}

func (f *keyedTimers[K, Out]) advanceWatermark(wm int64) error {
	return f.svc.AdvanceWatermark(wm, f.eventTime)
}

// advanceProcessingTime fires the processing-time timers due at now and
// asks for the next callback.
func (f *keyedTimers[K, Out]) advanceProcessingTime(now int64) error {
	if err := f.svc.AdvanceProcessingTime(now, f.processingTime); err != nil {
		return err
	}
	if t, ok := f.svc.NextProcessingTime(); ok {
		f.rc.timers.ctx.RequestProcessingTime(t)
	}
	return nil
}

// fire calls OnTimer for timer t, with the keyed state scoped to its key.
func (f *keyedTimers[K, Out]) fire(t eventtime.Timer, d TimeDomain, outTS int64) error {
	if f.onTimer == nil {
		return f.op.fail(fmt.Errorf("a %s timer fired, but the %s has no OnTimer (implement weir.TimerFunction)", d, f.what))
	}
	key, err := f.kc.Decode(t.Key)
	if err != nil {
		return f.op.fail(fmt.Errorf("decoding the key of a timer: %w", err))
	}
	f.setKey(key)
	f.out.ts, f.rc.ts = outTS, t.Timestamp
	if f.before != nil {
		f.before()
	}
	return done(f.op, f.out, f.rc, f.onTimer.OnTimer(key, t.Timestamp, d, f.out))
}
