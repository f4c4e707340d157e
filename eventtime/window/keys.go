package window

import (
	"encoding/binary"
	"fmt"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state/heap"
)

// keyer sets the backend's current key by value, for a heap backend
// holding the operator's keys as values (see UseKeyCodec): the record key,
// or the record key with a window, without serializing either or hashing
// the bytes. The core keeps the record key serialized as well, for the
// timer service and the output.
type keyer interface {
	// setKey decodes the record key key; false if it does not decode.
	setKey(key []byte) bool
	// useKey makes the record key, in key group kg, the current key.
	useKey(kg int)
	// useWindow makes the key of the record key's window w current.
	useWindow(w Window, kg int)
}

// intKey is a record key type whose built-in codec is fixed-size and
// agrees with ==.
type intKey interface {
	~int64 | ~int | ~int32 | ~uint64 | ~uint32
}

// windowKey is a key of a window operator's state held by value: a record
// key (the timers and sessions of the key), or a record key with a time
// window (a window's contents and trigger state). It encodes as the record
// key, then the window's encoding (appendWindow) if w: the bytes the
// operator uses with serialized keys, so the snapshot format is the same.
// The global window encodes as nothing, and is held as the record key.
type windowKey[K intKey] struct {
	k          K
	start, end int64
	w          bool
}

// windowKeyCodec encodes windowKeys; size is the record key codec's fixed
// size.
type windowKeyCodec[K intKey] struct {
	kc   codec.Codec[K]
	size int
}

func (c windowKeyCodec[K]) Append(dst []byte, k windowKey[K]) []byte {
	dst = c.kc.Append(dst, k.k)
	if k.w {
		dst = appendWindow(dst, Window{Start: k.start, End: k.end})
	}
	return dst
}

func (c windowKeyCodec[K]) Decode(b []byte) (windowKey[K], error) {
	var wk windowKey[K]
	switch len(b) {
	case c.size:
	case c.size + windowLen:
		w, err := decodeWindow(b[c.size:])
		if err != nil {
			return wk, err
		}
		wk.start, wk.end, wk.w = w.Start, w.End, true
	default:
		return wk, fmt.Errorf("window: key of %d bytes is neither a record key of %d bytes nor one with a window", len(b), c.size)
	}
	k, err := c.kc.Decode(b[:c.size])
	wk.k = k
	return wk, err
}

// hash places a windowKey in the backend's tables (heap.UseKeysHashed):
// the xor of its parts, each times an odd constant; the table mixes the
// bits further.
func (windowKeyCodec[K]) hash(k windowKey[K]) uint64 {
	h := uint64(k.k) * 0x9e3779b97f4a7c15
	if k.w {
		h ^= uint64(k.start)*0xc2b2ae3d27d4eb4f ^ uint64(k.end)*0x165667b19e3779f9
	}
	return h
}

// typedKeys is the keyer of record keys of type K.
type typedKeys[K intKey] struct {
	c   windowKeyCodec[K]
	set func(windowKey[K], int, uint64) error
	cur windowKey[K] // the record key; cur.w is false
}

func (t *typedKeys[K]) setKey(key []byte) bool {
	// The built-in integer codecs are big-endian two's complement, so the
	// key converts straight from its bytes (a key that came with an
	// element was encoded from a K, and one the backend holds decoded
	// with the codec when it switched to keys by value).
	switch {
	case len(key) != t.c.size:
		return false
	case t.c.size == 8:
		t.cur.k = K(binary.BigEndian.Uint64(key))
	default:
		t.cur.k = K(binary.BigEndian.Uint32(key))
	}
	return true
}

func (t *typedKeys[K]) useKey(kg int) { mustSetKey(t.set(t.cur, kg, t.c.hash(t.cur))) }

func (t *typedKeys[K]) useWindow(w Window, kg int) {
	wk := t.cur
	if !w.global {
		wk.start, wk.end, wk.w = w.Start, w.End, true
	}
	mustSetKey(t.set(wk, kg, t.c.hash(wk)))
}

// mustSetKey checks the result of setting the backend's current key in a
// key group the core checked when the key came in (core.setKey): an
// error is a bug.
func mustSetKey(err error) {
	if err != nil {
		panic(fmt.Sprintf("window: key group checked on entry, refused by the backend: %v", err))
	}
}

// newTypedKeys switches b to windowKeys of record keys of type K.
func newTypedKeys[K intKey](b *heap.Backend, kc codec.Codec[K], size int) (keyer, error) {
	c := windowKeyCodec[K]{kc: kc, size: size}
	keys, err := heap.UseKeysHashed(b, codec.Codec[windowKey[K]](c), c.hash)
	if err != nil {
		return nil, err
	}
	return &typedKeys[K]{c: c, set: keys.Set}, nil
}

// UseKeyCodec tells op the codec of its record keys, kc, which encoded
// the keys its elements come with. When op's backend is the heap backend
// and kc a built-in integer codec, the backend then holds op's keys as
// values, which saves serializing and hashing a key (and its window) for
// every state access; otherwise nothing changes. The snapshot format is
// the same either way, so a job may restore from a snapshot taken with or
// without it. Call it right after New, before the first element.
func UseKeyCodec[K any, IN, OUT any](op *Operator[IN, OUT], kc codec.Codec[K]) error {
	b, ok := op.c.b.(*heap.Backend)
	if !ok {
		return nil
	}
	var k keyer
	var err error
	switch kc := any(kc).(type) {
	case codec.Int64Codec:
		k, err = newTypedKeys[int64](b, kc, 8)
	case codec.IntCodec:
		k, err = newTypedKeys[int](b, kc, 8)
	case codec.Uint64Codec:
		k, err = newTypedKeys[uint64](b, kc, 8)
	case codec.Int32Codec:
		k, err = newTypedKeys[int32](b, kc, 4)
	case codec.Uint32Codec:
		k, err = newTypedKeys[uint32](b, kc, 4)
	default:
		return nil
	}
	if err != nil {
		return fmt.Errorf("window: the keys in the backend do not decode with the record key codec %T: %w", kc, err)
	}
	op.c.keys = k
	op.c.cur = keyUnset
	return nil
}
