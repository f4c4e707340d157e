package window

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
)

// Function is a window function: how a window keeps its elements and what
// a firing emits. Build one with Reduce, Aggregate or Process; the zero
// Function is invalid.
type Function[IN, OUT any] struct {
	name  string
	build func() (windowFunc[IN, OUT], error)
}

// windowFunc is one operator's instance of a Function. Its methods run
// with the backend's current key set to the window's key.
type windowFunc[IN, OUT any] interface {
	// kind is the kind of the contents state.
	kind() state.Kind
	// register registers the contents state called name in b, checking
	// (and migrating) it against the schema it was restored with.
	register(b state.KeyedBackend, name string) (state.StateID, error)
	// add adds v to the contents in state id; existed reports that there
	// were contents before (false when it cannot tell).
	add(b state.KeyedBackend, id state.StateID, v IN) (existed bool, err error)
	// emit calls emit for the result(s) of the contents raw.
	emit(raw []byte, key []byte, w Window, emit func(OUT) error) error
	// merge appends to dst the contents combining parts, in order.
	merge(dst []byte, parts [][]byte) ([]byte, error)
	// canMerge reports an error if the function cannot merge contents.
	canMerge() error
}

// Reduce keeps one value per window, folding each element into it with
// reduce (incremental aggregation); a firing emits that value. c encodes
// the value in state.
func Reduce[T any](c codec.Codec[T], reduce func(acc, v T) T) Function[T, T] {
	return Function[T, T]{name: "reduce", build: func() (windowFunc[T, T], error) {
		if c == nil || reduce == nil {
			return nil, errors.New("window: Reduce needs a codec and a reduce function")
		}
		f := &reduceFunc[T]{c: c, reduce: reduce}
		f.fold = f.foldIn
		return f, nil
	}}
}

// AggregateFunction adds elements to an accumulator (Flink's
// AggregateFunction): New creates an empty one, Add adds an element, Merge
// combines two (session windows merge their accumulators; it may be nil
// for other windows), Result turns it into the window's result. Codec
// encodes accumulators in state.
type AggregateFunction[IN, ACC, OUT any] struct {
	Codec  codec.Codec[ACC]
	New    func() ACC
	Add    func(acc ACC, v IN) ACC
	Merge  func(a, b ACC) ACC
	Result func(acc ACC) OUT
}

// Aggregate keeps one accumulator per window (incremental aggregation); a
// firing emits f.Result of it.
func Aggregate[IN, ACC, OUT any](f AggregateFunction[IN, ACC, OUT]) Function[IN, OUT] {
	return Function[IN, OUT]{name: "aggregate", build: func() (windowFunc[IN, OUT], error) {
		if f.Codec == nil || f.New == nil || f.Add == nil || f.Result == nil {
			return nil, errors.New("window: Aggregate needs Codec, New, Add and Result")
		}
		a := &aggregateFunc[IN, ACC, OUT]{f: f}
		a.fold = a.foldIn
		return a, nil
	}}
}

// ProcessFunc computes the results of one firing of key's window w from
// all its elements, in the order they were added (after a session merge:
// the merged sessions' elements by ascending session start). It emits any
// number of results through emit. elems is valid only during the call.
type ProcessFunc[IN, OUT any] func(key []byte, w Window, elems []IN, emit func(OUT) error) error

// Process keeps every element of a window (c encodes them in state) and
// hands them all to fn at each firing (Flink's ProcessWindowFunction).
func Process[IN, OUT any](c codec.Codec[IN], fn ProcessFunc[IN, OUT]) Function[IN, OUT] {
	return Function[IN, OUT]{name: "process", build: func() (windowFunc[IN, OUT], error) {
		if c == nil || fn == nil {
			return nil, errors.New("window: Process needs a codec and a function")
		}
		return &processFunc[IN, OUT]{c: c, fn: fn}, nil
	}}
}

// folder adds an element to a window's contents with its owner's fold,
// which folds in into the stored value (a state.UpdateFunc): in place
// through the backend's state.Updater when it has one, else by a Get and
// a Put.
type folder[T any] struct {
	fold    state.UpdateFunc // the owner's foldIn, made once
	in      T                // the element being added, for fold
	existed bool             // fold found contents; fold sets it
	b       state.KeyedBackend
	upd     state.Updater // b, if it is one
	buf     []byte
}

// add folds v into the contents of state id of b's current key and
// reports whether there were contents.
func (f *folder[T]) add(b state.KeyedBackend, id state.StateID, v T) (bool, error) {
	if f.b != b { // the operator's backend, resolved once
		f.b = b
		f.upd, _ = b.(state.Updater)
	}
	f.in, f.existed = v, false
	var err error
	if f.upd != nil {
		err = f.upd.Update(id, f.fold)
	} else {
		err = f.getFoldPut(b, id)
	}
	var zero T
	f.in = zero // the element is not kept beyond the call
	return f.existed, err
}

// getFoldPut is add without an Updater.
func (f *folder[T]) getFoldPut(b state.KeyedBackend, id state.StateID) error {
	raw, ok, err := b.Get(id, nil)
	if err != nil {
		return err
	}
	if f.buf, err = f.fold(raw, ok, f.buf[:0]); err != nil {
		return err
	}
	return b.Put(id, nil, f.buf)
}

type reduceFunc[T any] struct {
	folder[T]
	c      codec.Codec[T]
	reduce func(acc, v T) T
}

func (f *reduceFunc[T]) kind() state.Kind { return state.KindValue }
func (f *reduceFunc[T]) register(b state.KeyedBackend, name string) (state.StateID, error) {
	return state.RegisterState(b, name, state.KindValue, f.c, nil)
}
func (f *reduceFunc[T]) canMerge() error { return nil }

// foldIn folds f.in into the stored value.
func (f *reduceFunc[T]) foldIn(old []byte, ok bool, dst []byte) ([]byte, error) {
	v := f.in
	if ok {
		acc, err := f.c.Decode(old)
		if err != nil {
			return nil, err
		}
		v = f.reduce(acc, v)
	}
	f.existed = ok
	return f.c.Append(dst, v), nil
}

func (f *reduceFunc[T]) emit(raw []byte, _ []byte, _ Window, emit func(T) error) error {
	v, err := f.c.Decode(raw)
	if err != nil {
		return err
	}
	return emit(v)
}

func (f *reduceFunc[T]) merge(dst []byte, parts [][]byte) ([]byte, error) {
	var acc T
	for i, p := range parts {
		v, err := f.c.Decode(p)
		if err != nil {
			return dst, err
		}
		if i == 0 {
			acc = v
		} else {
			acc = f.reduce(acc, v)
		}
	}
	return f.c.Append(dst, acc), nil
}

type aggregateFunc[IN, ACC, OUT any] struct {
	folder[IN]
	f AggregateFunction[IN, ACC, OUT]
}

func (f *aggregateFunc[IN, ACC, OUT]) kind() state.Kind { return state.KindValue }
func (f *aggregateFunc[IN, ACC, OUT]) register(b state.KeyedBackend, name string) (state.StateID, error) {
	return state.RegisterState(b, name, state.KindValue, f.f.Codec, nil)
}

func (f *aggregateFunc[IN, ACC, OUT]) canMerge() error {
	if f.f.Merge == nil {
		return errors.New("window: session windows need AggregateFunction.Merge")
	}
	return nil
}

// foldIn adds f.in to the stored accumulator.
func (f *aggregateFunc[IN, ACC, OUT]) foldIn(old []byte, ok bool, dst []byte) ([]byte, error) {
	var acc ACC
	if ok {
		var err error
		if acc, err = f.f.Codec.Decode(old); err != nil {
			return nil, err
		}
	} else {
		acc = f.f.New()
	}
	f.existed = ok
	return f.f.Codec.Append(dst, f.f.Add(acc, f.in)), nil
}

func (f *aggregateFunc[IN, ACC, OUT]) emit(raw []byte, _ []byte, _ Window, emit func(OUT) error) error {
	acc, err := f.f.Codec.Decode(raw)
	if err != nil {
		return err
	}
	return emit(f.f.Result(acc))
}

func (f *aggregateFunc[IN, ACC, OUT]) merge(dst []byte, parts [][]byte) ([]byte, error) {
	var acc ACC
	for i, p := range parts {
		a, err := f.f.Codec.Decode(p)
		if err != nil {
			return dst, err
		}
		if i == 0 {
			acc = a
		} else {
			acc = f.f.Merge(acc, a)
		}
	}
	return f.f.Codec.Append(dst, acc), nil
}

// processFunc keeps the elements as a list state: each element is
// uvarint(len) | encoding, appended.
type processFunc[IN, OUT any] struct {
	c     codec.Codec[IN]
	fn    ProcessFunc[IN, OUT]
	buf   []byte
	elems []IN
}

func (f *processFunc[IN, OUT]) kind() state.Kind { return state.KindList }
func (f *processFunc[IN, OUT]) register(b state.KeyedBackend, name string) (state.StateID, error) {
	return state.RegisterState(b, name, state.KindList, f.c, nil)
}
func (f *processFunc[IN, OUT]) canMerge() error { return nil }

func (f *processFunc[IN, OUT]) add(b state.KeyedBackend, id state.StateID, v IN) (bool, error) {
	f.buf = f.c.Append(f.buf[:0], v)
	// Frame it: the length goes first, so encode the element, then write
	// uvarint(len) | element in one Append.
	n := len(f.buf)
	var hdr [binary.MaxVarintLen64]byte
	h := binary.PutUvarint(hdr[:], uint64(n))
	f.buf = append(f.buf, hdr[:h]...)
	f.buf = append(f.buf, f.buf[:n]...)
	return false, b.Append(id, f.buf[n:])
}

func (f *processFunc[IN, OUT]) emit(raw []byte, key []byte, w Window, emit func(OUT) error) error {
	clear(f.elems)
	f.elems = f.elems[:0]
	for len(raw) > 0 {
		n, k := binary.Uvarint(raw)
		if k <= 0 || uint64(len(raw)-k) < n {
			return fmt.Errorf("%w: bad window element framing", state.ErrCorruptState)
		}
		v, err := f.c.Decode(raw[k : k+int(n)])
		if err != nil {
			return err
		}
		f.elems = append(f.elems, v)
		raw = raw[k+int(n):]
	}
	return f.fn(key, w, f.elems, emit)
}

func (f *processFunc[IN, OUT]) merge(dst []byte, parts [][]byte) ([]byte, error) {
	for _, p := range parts {
		dst = append(dst, p...)
	}
	return dst, nil
}
