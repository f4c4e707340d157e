package state

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/weirstream/weir/codec"
)

// ErrCorruptState is returned when stored state bytes cannot be decoded.
var ErrCorruptState = errors.New("state: corrupt state value")

// checkArgs reports what is missing to register a state, if anything.
func checkArgs(b KeyedBackend, name string, kind Kind, haveCodec bool) error {
	if b == nil {
		return errors.New("state: nil backend")
	}
	if name == "" {
		return fmt.Errorf("state: %s state without a name", kind)
	}
	if !haveCodec {
		return fmt.Errorf("state: %s state %q without a codec", kind, name)
	}
	return nil
}

// ValueState is a keyed state holding one value per key. It is scoped to the
// backend's current key and used only from the task goroutine.
type ValueState[T any] struct {
	b       KeyedBackend
	id      StateID
	c       codec.Codec[T]
	def     T
	scratch []byte
}

// GetValueState returns the value state described by d, registering it on
// first use. Getting the same name again returns a state over the same data;
// an existing state of another kind is an error.
func GetValueState[T any](b KeyedBackend, d ValueDescriptor[T]) (*ValueState[T], error) {
	id, err := registerKeyed(b, d.Name, KindValue, d.Codec, nil, d.TTL)
	if err != nil {
		return nil, err
	}
	enableTTL(b, id, d.TTL)
	return &ValueState[T]{b: b, id: id, c: withTTL(d.Codec, d.TTL), def: d.Default}, nil
}

// Value returns the current key's value, or the descriptor's Default (also
// when the value expired: it is then deleted).
func (s *ValueState[T]) Value() (T, error) {
	raw, ok, err := s.b.Get(s.id, nil)
	if err != nil || !ok {
		return s.def, err
	}
	v, err := s.c.Decode(raw)
	if errors.Is(err, errExpired) {
		return s.def, s.b.Clear(s.id)
	}
	return v, err
}

// Update sets the current key's value.
func (s *ValueState[T]) Update(v T) error {
	s.scratch = s.c.Append(s.scratch[:0], v)
	return s.b.Put(s.id, nil, s.scratch)
}

// Clear removes the current key's value.
func (s *ValueState[T]) Clear() error { return s.b.Clear(s.id) }

// ListState is a keyed state holding a list per key.
type ListState[T any] struct {
	b       KeyedBackend
	id      StateID
	c       codec.Codec[T]
	scratch []byte
	elem    []byte
}

// GetListState returns the keyed list state described by d (see
// GetValueState for registration rules).
func GetListState[T any](b KeyedBackend, d ListDescriptor[T]) (*ListState[T], error) {
	id, err := registerKeyed(b, d.Name, KindList, d.Codec, nil, d.TTL)
	if err != nil {
		return nil, err
	}
	enableTTL(b, id, d.TTL)
	return &ListState[T]{b: b, id: id, c: withTTL(d.Codec, d.TTL)}, nil
}

// Add appends v to the current key's list.
func (s *ListState[T]) Add(v T) error {
	s.elem = s.c.Append(s.elem[:0], v)
	s.scratch = appendFramed(s.scratch[:0], s.elem)
	return s.b.Append(s.id, s.scratch)
}

// Get returns the current key's list (nil if empty).
func (s *ListState[T]) Get() ([]T, error) {
	var out []T
	err := s.All(func(v T) bool { out = append(out, v); return true })
	return out, err
}

// All calls fn for each element of the current key's list until fn returns
// false.
func (s *ListState[T]) All(fn func(T) bool) error {
	raw, ok, err := s.b.Get(s.id, nil)
	if err != nil || !ok {
		return err
	}
	for len(raw) > 0 {
		e, rest, err := splitFramed(raw)
		if err != nil {
			return err
		}
		raw = rest
		v, err := s.c.Decode(e)
		if errors.Is(err, errExpired) {
			continue
		}
		if err != nil {
			return err
		}
		if !fn(v) {
			return nil
		}
	}
	return nil
}

// Update replaces the current key's list with vs (empty vs clears it).
func (s *ListState[T]) Update(vs []T) error {
	if len(vs) == 0 {
		return s.b.Clear(s.id)
	}
	s.scratch = s.scratch[:0]
	for _, v := range vs {
		s.elem = s.c.Append(s.elem[:0], v)
		s.scratch = appendFramed(s.scratch, s.elem)
	}
	return s.b.Put(s.id, nil, s.scratch)
}

// Clear removes the current key's list.
func (s *ListState[T]) Clear() error { return s.b.Clear(s.id) }

// MapState is a keyed state holding a map per key.
type MapState[K, V any] struct {
	b    KeyedBackend
	id   StateID
	ttl  bool
	kc   codec.Codec[K]
	vc   codec.Codec[V]
	kbuf []byte
	vbuf []byte
}

// GetMapState returns the keyed map state described by d (see GetValueState
// for registration rules).
func GetMapState[K, V any](b KeyedBackend, d MapDescriptor[K, V]) (*MapState[K, V], error) {
	id, err := registerKeyed(b, d.Name, KindMap, d.ValueCodec, d.KeyCodec, d.TTL)
	if err != nil {
		return nil, err
	}
	enableTTL(b, id, d.TTL)
	return &MapState[K, V]{b: b, id: id, ttl: d.TTL.enabled(), kc: d.KeyCodec, vc: withTTL(d.ValueCodec, d.TTL)}, nil
}

// Get returns the value of user key k of the current key.
func (s *MapState[K, V]) Get(k K) (V, bool, error) {
	var zero V
	s.kbuf = s.kc.Append(s.kbuf[:0], k)
	raw, ok, err := s.b.Get(s.id, s.kbuf)
	if err != nil || !ok {
		return zero, false, err
	}
	v, err := s.vc.Decode(raw)
	if errors.Is(err, errExpired) {
		return zero, false, nil
	}
	return v, err == nil, err
}

// Contains reports whether user key k is present for the current key.
func (s *MapState[K, V]) Contains(k K) (bool, error) {
	if s.ttl {
		_, ok, err := s.Get(k)
		return ok, err
	}
	s.kbuf = s.kc.Append(s.kbuf[:0], k)
	_, ok, err := s.b.Get(s.id, s.kbuf)
	return ok, err
}

// Put sets user key k to v for the current key.
func (s *MapState[K, V]) Put(k K, v V) error {
	s.kbuf = s.kc.Append(s.kbuf[:0], k)
	s.vbuf = s.vc.Append(s.vbuf[:0], v)
	return s.b.Put(s.id, s.kbuf, s.vbuf)
}

// Remove deletes user key k of the current key.
func (s *MapState[K, V]) Remove(k K) error {
	s.kbuf = s.kc.Append(s.kbuf[:0], k)
	return s.b.Delete(s.id, s.kbuf)
}

// All calls fn for each entry of the current key's map, in no particular
// order, until fn returns false. fn must not modify state.
func (s *MapState[K, V]) All(fn func(K, V) bool) error {
	var derr error
	err := s.b.Iterate(s.id, func(uk, uv []byte) bool {
		k, err := s.kc.Decode(uk)
		if err != nil {
			derr = err
			return false
		}
		v, err := s.vc.Decode(uv)
		if errors.Is(err, errExpired) {
			return true
		}
		if err != nil {
			derr = err
			return false
		}
		return fn(k, v)
	})
	if err != nil {
		return err
	}
	return derr
}

// IsEmpty reports whether the current key's map has no entries.
func (s *MapState[K, V]) IsEmpty() (bool, error) {
	empty := true
	if s.ttl {
		err := s.All(func(K, V) bool { empty = false; return false })
		return empty, err
	}
	err := s.b.Iterate(s.id, func(_, _ []byte) bool { empty = false; return false })
	return empty, err
}

// Clear removes every entry of the current key's map.
func (s *MapState[K, V]) Clear() error { return s.b.Clear(s.id) }

// ReducingState is a keyed state that folds added values with a reduce
// function.
type ReducingState[T any] struct {
	b       KeyedBackend
	id      StateID
	c       codec.Codec[T]
	reduce  func(T, T) T
	scratch []byte

	// With an Updater backend, AddAndGet folds in place: fold (s.foldIn
	// as a func value, made once) takes in and leaves the result in out.
	upd     Updater
	fold    UpdateFunc
	in, out T
}

// GetReducingState returns the keyed reducing state described by d (see
// GetValueState for registration rules).
func GetReducingState[T any](b KeyedBackend, d ReducingDescriptor[T]) (*ReducingState[T], error) {
	if d.Reduce == nil {
		return nil, fmt.Errorf("state: reducing state %q without a reduce function", d.Name)
	}
	id, err := registerKeyed(b, d.Name, KindReducing, d.Codec, nil, d.TTL)
	if err != nil {
		return nil, err
	}
	enableTTL(b, id, d.TTL)
	s := &ReducingState[T]{b: b, id: id, c: withTTL(d.Codec, d.TTL), reduce: d.Reduce}
	if u, ok := b.(Updater); ok {
		s.upd, s.fold = u, s.foldIn
	}
	return s, nil
}

// foldIn is the UpdateFunc of AddAndGet: old reduced with s.in, into s.out.
func (s *ReducingState[T]) foldIn(old []byte, ok bool, dst []byte) ([]byte, error) {
	v := s.in
	if ok {
		cur, err := s.c.Decode(old)
		switch {
		case err == nil:
			v = s.reduce(cur, v)
		case !errors.Is(err, errExpired):
			return nil, err
		}
	}
	s.out = v
	return s.c.Append(dst, v), nil
}

// Get returns the current key's reduced value and whether there is one.
func (s *ReducingState[T]) Get() (T, bool, error) {
	var zero T
	raw, ok, err := s.b.Get(s.id, nil)
	if err != nil || !ok {
		return zero, false, err
	}
	v, err := s.c.Decode(raw)
	if errors.Is(err, errExpired) {
		return zero, false, nil
	}
	return v, err == nil, err
}

// Add folds v into the current key's value.
func (s *ReducingState[T]) Add(v T) error {
	_, err := s.AddAndGet(v)
	return err
}

// AddAndGet folds v into the current key's value and returns the new
// value: Add followed by Get with one state lookup and one decode instead
// of two (a running aggregate emits the value it just stored). The value
// returned is the one the reduce function returned, which is what Get
// would decode when the codec round-trips.
func (s *ReducingState[T]) AddAndGet(v T) (T, error) {
	if s.upd != nil {
		var zero T
		s.in = v
		err := s.upd.Update(s.id, s.fold)
		r := s.out
		s.in, s.out = zero, zero // hold no references
		if err != nil {
			return zero, err
		}
		return r, nil
	}
	cur, ok, err := s.Get()
	if err != nil {
		var zero T
		return zero, err
	}
	if ok {
		v = s.reduce(cur, v)
	}
	s.scratch = s.c.Append(s.scratch[:0], v)
	if err := s.b.Put(s.id, nil, s.scratch); err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// Clear removes the current key's value.
func (s *ReducingState[T]) Clear() error { return s.b.Clear(s.id) }

// AggregatingState is a keyed state that adds inputs to an accumulator.
type AggregatingState[IN, ACC, OUT any] struct {
	b       KeyedBackend
	id      StateID
	d       AggregatingDescriptor[IN, ACC, OUT]
	scratch []byte

	// With an Updater backend, Add folds in place through fold (s.addIn,
	// made once), which takes in.
	upd  Updater
	fold UpdateFunc
	in   IN
}

// GetAggregatingState returns the keyed aggregating state described by d
// (see GetValueState for registration rules).
func GetAggregatingState[IN, ACC, OUT any](b KeyedBackend, d AggregatingDescriptor[IN, ACC, OUT]) (*AggregatingState[IN, ACC, OUT], error) {
	if d.NewAcc == nil || d.Add == nil || d.Result == nil {
		return nil, fmt.Errorf("state: aggregating state %q needs NewAcc, Add and Result", d.Name)
	}
	id, err := registerKeyed(b, d.Name, KindAggregating, d.AccCodec, nil, d.TTL)
	if err != nil {
		return nil, err
	}
	enableTTL(b, id, d.TTL)
	d.AccCodec = withTTL(d.AccCodec, d.TTL)
	s := &AggregatingState[IN, ACC, OUT]{b: b, id: id, d: d}
	if u, ok := b.(Updater); ok {
		s.upd, s.fold = u, s.addIn
	}
	return s, nil
}

// addIn is the UpdateFunc of Add: s.in added to the stored accumulator.
func (s *AggregatingState[IN, ACC, OUT]) addIn(old []byte, ok bool, dst []byte) ([]byte, error) {
	var acc ACC
	if ok {
		var err error
		acc, err = s.d.AccCodec.Decode(old)
		if errors.Is(err, errExpired) {
			ok = false
		} else if err != nil {
			return nil, err
		}
	}
	if !ok {
		acc = s.d.NewAcc()
	}
	return s.d.AccCodec.Append(dst, s.d.Add(acc, s.in)), nil
}

// Get returns the current key's result and whether anything was added.
func (s *AggregatingState[IN, ACC, OUT]) Get() (OUT, bool, error) {
	var zero OUT
	raw, ok, err := s.b.Get(s.id, nil)
	if err != nil || !ok {
		return zero, false, err
	}
	acc, err := s.d.AccCodec.Decode(raw)
	if errors.Is(err, errExpired) {
		return zero, false, nil
	}
	if err != nil {
		return zero, false, err
	}
	return s.d.Result(acc), true, nil
}

// Add adds in to the current key's accumulator.
func (s *AggregatingState[IN, ACC, OUT]) Add(in IN) error {
	if s.upd != nil {
		s.in = in
		err := s.upd.Update(s.id, s.fold)
		var zero IN
		s.in = zero
		return err
	}
	raw, ok, err := s.b.Get(s.id, nil)
	if err != nil {
		return err
	}
	var acc ACC
	if ok {
		acc, err = s.d.AccCodec.Decode(raw)
		if errors.Is(err, errExpired) {
			ok = false
		} else if err != nil {
			return err
		}
	}
	if !ok {
		acc = s.d.NewAcc()
	}
	acc = s.d.Add(acc, in)
	s.scratch = s.d.AccCodec.Append(s.scratch[:0], acc)
	return s.b.Put(s.id, nil, s.scratch)
}

// Clear removes the current key's accumulator.
func (s *AggregatingState[IN, ACC, OUT]) Clear() error { return s.b.Clear(s.id) }

// appendFramed appends uvarint(len(p)) | p.
func appendFramed(dst, p []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(p)))
	return append(dst, p...)
}

// splitFramed splits one uvarint-framed element off the front of src.
func splitFramed(src []byte) (elem, rest []byte, err error) {
	n, k := binary.Uvarint(src)
	if k <= 0 || uint64(len(src)-k) < n {
		return nil, nil, fmt.Errorf("%w: bad list element framing", ErrCorruptState)
	}
	return src[k : k+int(n)], src[k+int(n):], nil
}
