package weir

import (
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/state"
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
// equal bytes.
func KeyBy[T any, K any](s *Stream[T], key func(T) K, kc codec.Codec[K]) *KeyedStream[T, K] {
	return &KeyedStream[T, K]{s: s, fn: key, kc: kc}
}

// keyHasher returns a function hashing a value's encoded key. Each call
// returns a function with its own scratch buffer (one per goroutine).
func (ks *KeyedStream[T, K]) keyHasher() func(T) uint64 {
	var buf []byte
	return func(v T) uint64 {
		buf = ks.kc.Append(buf[:0], ks.fn(v))
		return codec.Hash64(buf)
	}
}

// keyedOp adds a keyed operator consuming ks.
func keyedOp[T, K, Out any](ks *KeyedStream[T, K], name string, build func(rc *graph.Subtask, kc *keyContext[T, K], next collector[Out]) (collector[T], task.Operator, error)) *Stream[Out] {
	s := ks.s
	n := s.env.addNode(&graph.Node{Name: name, Keyed: true})
	e := &graph.Edge{From: s.n, To: n, Partitioning: network.Hash}
	n.Input = e
	s.n.Outputs = append(s.n.Outputs, e)
	e.KeyHash = ks.keyHasher // a factory: each writer gets its own scratch
	n.Decoder = decoderFor(s)
	n.Instantiate = func(rc *graph.Subtask, out any) (any, task.Operator, error) {
		next, _ := out.(collector[Out])
		if next == nil {
			next = discard[Out]{}
		}
		kc := &keyContext[T, K]{fn: ks.fn, kc: ks.kc, maxPar: rc.MaxParallelism}
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
	maxPar  int
	backend state.KeyedBackend
	buf     []byte
	key     K
}

func (c *keyContext[T, K]) setKey(v T) {
	c.key = c.fn(v)
	c.buf = c.kc.Append(c.buf[:0], c.key)
	c.backend.SetCurrentKey(c.buf, keygroup.ForHash(codec.Hash64(c.buf), c.maxPar))
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
	o.kc.backend = ctx.Keyed
	st, err := state.GetReducingState(ctx.Keyed, state.ReducingDescriptor[T]{Name: "reduce", Codec: o.codec, Reduce: o.fn})
	o.st = st
	return err
}

func (o *reduceOp[T, K]) collect(v T, ts int64) (err error) {
	defer o.catch(&err)
	o.kc.setKey(v)
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
	next collector[T]
	ts   int64 // the timestamp of what Emit sends
	err  error
}

// Emit sends v downstream, with the event timestamp of the value being
// processed (of the timer, in OnTimer).
func (c *Collector[T]) Emit(v T) {
	if c.err == nil {
		c.err = c.next.collect(v, c.ts)
	}
}

// RuntimeContext gives a user function its subtask and its state.
type RuntimeContext struct {
	Subtask     int
	Parallelism int
	keyed       state.KeyedBackend
}

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

// MapState returns the keyed map state called name.
func MapState[UK, V any](c *RuntimeContext, name string, kc codec.Codec[UK], vc codec.Codec[V]) (*state.MapState[UK, V], error) {
	return state.GetMapState(c.keyed, state.MapDescriptor[UK, V]{Name: name, KeyCodec: kc, ValueCodec: vc})
}

// Process applies a KeyedProcessFunction to every value of ks, with keyed
// state. newFn is called once per subtask (and again after a restart), so
// each subtask has its own function value.
func Process[K, In, Out any](ks *KeyedStream[In, K], newFn func() KeyedProcessFunction[K, In, Out]) *Stream[Out] {
	return keyedOp(ks, "process", func(rc *graph.Subtask, kc *keyContext[In, K], next collector[Out]) (collector[In], task.Operator, error) {
		o := &processOp[K, In, Out]{opBase: base(rc), kc: kc, fn: newFn(), out: &Collector[Out]{next: next}}
		return o, o, nil
	})
}

type processOp[K, In, Out any] struct {
	opBase
	kc  *keyContext[In, K]
	fn  KeyedProcessFunction[K, In, Out]
	out *Collector[Out]
}

func (o *processOp[K, In, Out]) Open(ctx *task.OperatorContext) (err error) {
	defer o.catch(&err)
	o.kc.backend = ctx.Keyed
	return o.fn.Open(&RuntimeContext{Subtask: ctx.Subtask, Parallelism: ctx.Parallelism, keyed: ctx.Keyed})
}

func (o *processOp[K, In, Out]) collect(v In, ts int64) (err error) {
	defer o.catch(&err)
	o.kc.setKey(v)
	o.out.ts = ts
	if err := o.fn.ProcessElement(o.kc.key, v, o.out); err != nil {
		return o.fail(err)
	}
	err, o.out.err = o.out.err, nil
	return err
}
