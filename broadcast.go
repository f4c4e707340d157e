package weir

import (
	"cmp"
	"fmt"
	"iter"
	"slices"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/eventtime/join"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/task"
)

// ErrBroadcastStateReadOnly is returned by a write to a broadcast state
// from the non-broadcast side (ProcessElement, OnTimer): only the broadcast
// side writes it, so that every subtask holds the same state.
var ErrBroadcastStateReadOnly = join.ErrBroadcastReadOnly

// BroadcastStateDescriptor names a broadcast state of a BroadcastStream:
// a MapStateDescriptor.
type BroadcastStateDescriptor interface {
	broadcastState() join.BroadcastState
}

// MapStateDescriptor describes a broadcast state: a map of K to V that the
// broadcast side of a (keyed) broadcast process function writes and every
// subtask holds whole (Flink's MapStateDescriptor of a broadcast state).
// Nil codecs mean the built-in codecs of K and V.
type MapStateDescriptor[K comparable, V any] struct {
	Name       string
	KeyCodec   codec.Codec[K]
	ValueCodec codec.Codec[V]
}

// broadcastState names the state and its codecs (nil: the built-in ones).
func (d MapStateDescriptor[K, V]) broadcastState() join.BroadcastState {
	st := join.BroadcastState{Name: d.Name, Key: d.KeyCodec, Value: d.ValueCodec}
	if d.KeyCodec == nil {
		st.Key = defaultCodec[K]()
	}
	if d.ValueCodec == nil {
		st.Value = defaultCodec[V]()
	}
	return st
}

// BroadcastStream is a stream sent whole to every subtask of the operator
// it is connected to (BroadcastProcess, KeyedBroadcastProcess), with the
// broadcast states that its values write there.
type BroadcastStream[T any] struct {
	s      *Stream[T]
	names  []string
	states []join.BroadcastState // by names
}

// Broadcast makes s a broadcast stream with the given broadcast states
// (Flink's DataStream.broadcast(descriptors...)). Each subtask of the
// operator it is connected to receives every value of s and keeps its own
// copy of the states, which checkpoints carry per subtask; restored at
// another parallelism, every new subtask gets a whole copy.
func Broadcast[T any](s *Stream[T], descriptors ...BroadcastStateDescriptor) *BroadcastStream[T] {
	b := &BroadcastStream[T]{s: s.Broadcast()}
	for _, d := range descriptors {
		st := d.broadcastState()
		if st.Name == "" || slices.Contains(b.names, st.Name) {
			s.env.fail(fmt.Errorf("weir: broadcast: broadcast state names must be non-empty and distinct, got %q twice or empty", st.Name))
		}
		b.names = append(b.names, st.Name)
		b.states = append(b.states, st)
	}
	return b
}

// BroadcastMap is a broadcast state as a function sees it: a map of K to V
// that every subtask holds whole. Only the broadcast side writes it (Put,
// Remove, Clear fail with ErrBroadcastStateReadOnly elsewhere); both sides
// read it. Its entries are in memory, decoded: reads cost a map lookup.
type BroadcastMap[K comparable, V any] struct {
	m      *join.BroadcastMap
	kc     codec.Codec[K]
	vc     codec.Codec[V]
	vals   map[K]broadcastEntry[V]
	order  []K // by encoded key; nil when stale
	kb, vb []byte
}

type broadcastEntry[V any] struct {
	enc string // the encoded key
	v   V
}

// GetBroadcastState returns the broadcast state d of the broadcast process
// function that ctx belongs to; d must be one of the descriptors given to
// Broadcast. Call it in Open; asking again returns the same map.
func GetBroadcastState[K comparable, V any](ctx *RuntimeContext, d MapStateDescriptor[K, V]) (*BroadcastMap[K, V], error) {
	bc := ctx.broadcast
	if bc == nil {
		return nil, fmt.Errorf("weir: broadcast state %q outside a broadcast process function", d.Name)
	}
	i := slices.IndexFunc(bc.decl, func(st join.BroadcastState) bool { return st.Name == d.Name })
	if i < 0 {
		return nil, fmt.Errorf("weir: broadcast state %q: not a state of the broadcast stream (give its descriptor to Broadcast)", d.Name)
	}
	if h, ok := bc.handles[d.Name]; ok {
		m, ok := h.(*BroadcastMap[K, V])
		if !ok {
			return nil, fmt.Errorf("weir: broadcast state %q asked for with another key or value type", d.Name)
		}
		return m, nil
	}
	if d.KeyCodec == nil {
		d.KeyCodec = defaultCodec[K]()
	}
	if d.ValueCodec == nil {
		d.ValueCodec = defaultCodec[V]()
	}
	if d.KeyCodec == nil || d.ValueCodec == nil {
		return nil, fmt.Errorf("weir: broadcast state %q needs a key and a value codec", d.Name)
	}
	if st := bc.decl[i]; codec.IdentityOf(d.KeyCodec) != codec.IdentityOf(st.Key) || codec.IdentityOf(d.ValueCodec) != codec.IdentityOf(st.Value) {
		return nil, fmt.Errorf("weir: broadcast state %q asked for with codecs %s → %s, but given to Broadcast with %s → %s", d.Name,
			codec.IdentityOf(d.KeyCodec), codec.IdentityOf(d.ValueCodec), codec.IdentityOf(st.Key), codec.IdentityOf(st.Value))
	}
	m := &BroadcastMap[K, V]{m: bc.states.Map(d.Name), kc: d.KeyCodec, vc: d.ValueCodec, vals: map[K]broadcastEntry[V]{}}
	for _, enc := range m.m.Keys() {
		k, err := m.kc.Decode([]byte(enc))
		if err != nil {
			return nil, fmt.Errorf("weir: broadcast state %q: decoding a key: %w", d.Name, err)
		}
		raw, _ := m.m.Get([]byte(enc))
		v, err := m.vc.Decode(raw)
		if err != nil {
			return nil, fmt.Errorf("weir: broadcast state %q: decoding a value: %w", d.Name, err)
		}
		m.vals[k] = broadcastEntry[V]{enc: enc, v: v}
	}
	bc.handles[d.Name] = m
	return m, nil
}

// Get returns the value of k.
func (m *BroadcastMap[K, V]) Get(k K) (V, bool) {
	e, ok := m.vals[k]
	return e.v, ok
}

// Contains reports whether k has a value.
func (m *BroadcastMap[K, V]) Contains(k K) bool {
	_, ok := m.vals[k]
	return ok
}

// Len is the number of entries.
func (m *BroadcastMap[K, V]) Len() int { return len(m.vals) }

// Put sets the value of k (broadcast side only).
func (m *BroadcastMap[K, V]) Put(k K, v V) error {
	m.kb = m.kc.Append(m.kb[:0], k)
	m.vb = m.vc.Append(m.vb[:0], v)
	if err := m.m.Put(m.kb, m.vb); err != nil {
		return err
	}
	if _, ok := m.vals[k]; !ok {
		m.order = nil
	}
	m.vals[k] = broadcastEntry[V]{enc: string(m.kb), v: v}
	return nil
}

// Remove removes k (broadcast side only).
func (m *BroadcastMap[K, V]) Remove(k K) error {
	m.kb = m.kc.Append(m.kb[:0], k)
	if err := m.m.Delete(m.kb); err != nil {
		return err
	}
	if _, ok := m.vals[k]; ok {
		delete(m.vals, k)
		m.order = nil
	}
	return nil
}

// Clear removes every entry (broadcast side only).
func (m *BroadcastMap[K, V]) Clear() error {
	if err := m.m.Clear(); err != nil {
		return err
	}
	clear(m.vals)
	m.order = nil
	return nil
}

// All iterates over the entries, ordered by their encoded keys as bytes:
// the same order on every subtask and after every restore, which is the
// keys' own order only where their codec keeps it (codec.Int64 does for
// keys ≥ 0, not for negative ones). A function whose result must not
// depend on the order (the latest rule before a time, say) compares the
// keys itself. The map must not change during the iteration.
func (m *BroadcastMap[K, V]) All() iter.Seq2[K, V] {
	if m.order == nil {
		m.order = make([]K, 0, len(m.vals))
		for k := range m.vals {
			m.order = append(m.order, k)
		}
		slices.SortFunc(m.order, func(a, b K) int { return cmp.Compare(m.vals[a].enc, m.vals[b].enc) })
	}
	order := m.order
	return func(yield func(K, V) bool) {
		for _, k := range order {
			if !yield(k, m.vals[k].v) {
				return
			}
		}
	}
}

// broadcastContext is what a broadcast process function's RuntimeContext
// holds of its broadcast states.
type broadcastContext struct {
	states  *join.BroadcastStates
	decl    []join.BroadcastState // the states given to Broadcast
	handles map[string]any        // *BroadcastMap[K, V] by name
}

// BroadcastProcessFunction processes a stream connected to a broadcast
// stream (Flink's BroadcastProcessFunction): ProcessBroadcastElement gets
// every value of the broadcast stream and may write the broadcast states
// (GetBroadcastState in Open), ProcessElement gets the subtask's share of
// the other stream and reads them. Both run in the task's goroutine.
type BroadcastProcessFunction[In, BC, Out any] interface {
	Open(ctx *RuntimeContext) error
	ProcessElement(v In, out *Collector[Out]) error
	ProcessBroadcastElement(v BC, out *Collector[Out]) error
}

// BroadcastProcess applies a BroadcastProcessFunction to s and the
// broadcast stream bs. newFn is called once per subtask (and again after a
// restart).
func BroadcastProcess[In, BC, Out any](s *Stream[In], bs *BroadcastStream[BC], newFn func() BroadcastProcessFunction[In, BC, Out]) *Stream[Out] {
	if s.env != bs.s.env {
		s.env.fail(fmt.Errorf("weir: broadcast process: the streams belong to different environments"))
	}
	out := addTwoInputOp(s, bs.s, "broadcast process", nil, nil, func(rc *graph.Subtask, next collector[Out]) (collector[In], collector[BC], task.Operator, error) {
		o := &broadcastProcessOp[In, BC, Out]{opBase: base(rc), fn: newFn(), decl: bs.states, out: &Collector[Out]{next: next}, sides: newSideCollectors(rc)}
		o.out.owner, o.sides.owner = &o.opBase, &o.opBase
		return inputFunc[In](o.process1), inputFunc[BC](o.process2), o, nil
	})
	out.process = true
	return out
}

type broadcastProcessOp[In, BC, Out any] struct {
	opBase
	fn     BroadcastProcessFunction[In, BC, Out]
	decl   []join.BroadcastState // the states given to Broadcast
	out    *Collector[Out]
	rc     *RuntimeContext
	states *join.BroadcastStates
	sides  *sideCollectors
	ctx    *task.OperatorContext
}

func (o *broadcastProcessOp[In, BC, Out]) Open(ctx *task.OperatorContext) (err error) {
	o.enter()
	defer o.catch(&err)
	o.ctx = ctx
	o.states = join.NewBroadcastStates()
	if err := o.states.Restore(ctx.OperatorState, o.decl); err != nil {
		return err
	}
	o.rc = &RuntimeContext{Subtask: ctx.Subtask, Parallelism: ctx.Parallelism, operator: ctx.OperatorState, ts: eventtime.NoTimestamp,
		sides: o.sides, broadcast: &broadcastContext{states: o.states, decl: o.decl, handles: map[string]any{}}}
	return o.fn.Open(o.rc)
}

func (o *broadcastProcessOp[In, BC, Out]) process1(v In, ts int64, _ int) error {
	o.enter()
	o.out.ts, o.rc.ts = ts, ts
	return done(&o.opBase, o.out, o.rc, o.fn.ProcessElement(v, o.out))
}

func (o *broadcastProcessOp[In, BC, Out]) process2(v BC, ts int64, _ int) error {
	o.enter()
	o.out.ts, o.rc.ts = ts, ts
	o.states.SetWritable(true)
	err := o.fn.ProcessBroadcastElement(v, o.out)
	o.states.SetWritable(false)
	return done(&o.opBase, o.out, o.rc, err)
}

// SnapshotState writes the broadcast states into the operator state,
// which the task snapshots next.
func (o *broadcastProcessOp[In, BC, Out]) SnapshotState(barrier.CheckpointID) error {
	return o.states.Snapshot(o.ctx.OperatorState)
}

// KeyedBroadcastProcessFunction processes a keyed stream connected to a
// broadcast stream (Flink's KeyedBroadcastProcessFunction).
// ProcessElement gets the values of the subtask's keys, with the key's
// keyed state and timers (ctx.Timers() of Open; OnTimer through
// TimerFunction), and reads the broadcast states; ProcessBroadcastElement
// gets every value of the broadcast stream, may write the broadcast
// states, and reaches the keyed state of every key through
// ApplyToKeyedState (it has no current key: timers cannot be set there,
// and keyed state is reached only through ApplyToKeyedState). The
// operator's event time is the minimum of both inputs' watermarks: give
// the broadcast stream timestamps and watermarks (or idleness) if the
// keyed side uses event time.
type KeyedBroadcastProcessFunction[K, In, BC, Out any] interface {
	Open(ctx *RuntimeContext) error
	ProcessElement(key K, v In, out *Collector[Out]) error
	ProcessBroadcastElement(v BC, ctx *BroadcastContext[K], out *Collector[Out]) error
}

// BroadcastContext is what ProcessBroadcastElement of a keyed broadcast
// process function gets besides the broadcast states.
type BroadcastContext[K any] struct {
	core *join.KeyedBroadcast
	kc   codec.Codec[K]
}

// ApplyToKeyedState calls fn for every key of the subtask that has keyed
// state called state (Flink's applyToKeyedState), with that key's keyed
// state current: fn reads and writes it through the states the function
// got in Open. Keys come in the order of their encoding.
func (c *BroadcastContext[K]) ApplyToKeyedState(state string, fn func(key K) error) error {
	return c.core.ForEachKey(state, func(key []byte, _ int) error {
		k, err := c.kc.Decode(key)
		if err != nil {
			return fmt.Errorf("decoding a key of keyed state %q: %w", state, err)
		}
		return fn(k)
	})
}

// KeyedBroadcastProcess applies a KeyedBroadcastProcessFunction to the
// keyed stream ks and the broadcast stream bs. newFn is called once per
// subtask (and again after a restart).
func KeyedBroadcastProcess[K, In, BC, Out any](ks *KeyedStream[In, K], bs *BroadcastStream[BC], newFn func() KeyedBroadcastProcessFunction[K, In, BC, Out]) *Stream[Out] {
	if ks.s.env != bs.s.env {
		ks.s.env.fail(fmt.Errorf("weir: keyed broadcast process: the streams belong to different environments"))
	}
	out := addTwoInputOp(ks.s, bs.s, "keyed broadcast process", ks.keyHasher, nil, func(rc *graph.Subtask, next collector[Out]) (collector[In], collector[BC], task.Operator, error) {
		kc := &keyContext[In, K]{fn: ks.fn, kc: ks.kc, hash: codec.HashFunc(ks.kc), maxPar: rc.MaxParallelism}
		o := &keyedBroadcastOp[K, In, BC, Out]{opBase: base(rc), kc: kc, fn: newFn(), decl: bs.states, out: &Collector[Out]{next: next}, sides: newSideCollectors(rc)}
		o.out.owner, o.sides.owner = &o.opBase, &o.opBase
		return inputFunc[In](o.process1), inputFunc[BC](o.process2), o, nil
	})
	out.process = true
	return out
}

type keyedBroadcastOp[K, In, BC, Out any] struct {
	opBase
	kc     *keyContext[In, K]
	fn     KeyedBroadcastProcessFunction[K, In, BC, Out]
	firing keyedTimers[K, Out]
	decl   []join.BroadcastState // the states given to Broadcast
	out    *Collector[Out]
	rc     *RuntimeContext
	core   *join.KeyedBroadcast
	bctx   *BroadcastContext[K]
	sides  *sideCollectors
}

func (o *keyedBroadcastOp[K, In, BC, Out]) Open(ctx *task.OperatorContext) (err error) {
	o.enter()
	defer o.catch(&err)
	if err := o.kc.open(ctx.Keyed); err != nil {
		return err
	}
	core, err := join.NewKeyedBroadcast(ctx.Keyed, ctx.OperatorState, o.decl)
	if err != nil {
		return err
	}
	o.core = core
	o.bctx = &BroadcastContext[K]{core: core, kc: o.kc.kc}
	o.rc = &RuntimeContext{Subtask: ctx.Subtask, Parallelism: ctx.Parallelism, keyed: ctx.Keyed, operator: ctx.OperatorState,
		timers: &TimerService{svc: core.Timers(), ctx: ctx, noKey: core.Broadcasting}, ts: eventtime.NoTimestamp, sides: o.sides,
		broadcast: &broadcastContext{states: core.States, decl: o.decl, handles: map[string]any{}}}
	o.firing = newKeyedTimers(&o.opBase, "keyed broadcast process function", o.fn, o.kc.kc, func(k K) { o.kc.key = k }, o.out, o.rc, core.Timers())
	o.firing.before = func() { core.States.SetWritable(false) }
	return o.firing.open(o.fn.Open(o.rc))
}

func (o *keyedBroadcastOp[K, In, BC, Out]) process1(v In, ts int64, g int) error {
	o.enter()
	o.kc.setKey(v, g) // the key's current in the backend
	o.out.ts, o.rc.ts = ts, ts
	o.core.States.SetWritable(false)
	return done(&o.opBase, o.out, o.rc, o.fn.ProcessElement(o.kc.key, v, o.out))
}

func (o *keyedBroadcastOp[K, In, BC, Out]) process2(v BC, ts int64, _ int) error {
	o.enter()
	o.out.ts, o.rc.ts = ts, ts
	err := o.core.ProcessBroadcast(func() error { return o.fn.ProcessBroadcastElement(v, o.bctx, o.out) })
	return done(&o.opBase, o.out, o.rc, err)
}

// SnapshotState writes the timers into the keyed backend and the
// broadcast states into the operator state, which the task snapshots next.
func (o *keyedBroadcastOp[K, In, BC, Out]) SnapshotState(barrier.CheckpointID) error {
	return o.core.PrepareSnapshot()
}

func (o *keyedBroadcastOp[K, In, BC, Out]) ProcessWatermark(wm int64) (_ bool, err error) {
	o.enter()
	defer o.catch(&err)
	return true, o.core.AdvanceWatermark(wm, o.firing.eventTime)
}

func (o *keyedBroadcastOp[K, In, BC, Out]) ProcessWatermarkStatus(eventtime.Status) (bool, error) {
	return true, nil
}

func (o *keyedBroadcastOp[K, In, BC, Out]) OnProcessingTime(now int64) (err error) {
	o.enter()
	defer o.catch(&err)
	return o.firing.advanceProcessingTime(now)
}
