package window

import (
	"encoding/binary"
	"fmt"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
)

// keyer sets the backend's current key by value, for a backend holding
// the operator's keys as state.ValueKeys (see UseKeyCodec): the record key,
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

// A window operator's key held by value is a state.ValueKey: a record key
// (the timers and sessions of the key), or a record key with a time window
// in NS (a window's contents and trigger state; HasNS). It encodes as the
// record key, then the window's encoding (appendWindow) if HasNS: the bytes
// the operator uses with serialized keys, so the snapshot format is the
// same. The global window encodes as nothing, and is held as the record
// key.

// windowKeyCodec encodes the operator's state.ValueKeys. The record key is
// size (4 or 8) bytes of a built-in integer codec, held as the big-endian
// integer of its bytes; check is that codec's Decode, which accepts the
// record keys it encodes.
type windowKeyCodec struct {
	size  int
	check func([]byte) error
}

func (c windowKeyCodec) Append(dst []byte, k state.ValueKey) []byte {
	if c.size == 8 {
		dst = binary.BigEndian.AppendUint64(dst, k.Key)
	} else {
		dst = binary.BigEndian.AppendUint32(dst, uint32(k.Key))
	}
	if k.HasNS {
		dst = appendWindow(dst, Window{Start: k.NS[0], End: k.NS[1]})
	}
	return dst
}

func (c windowKeyCodec) Decode(b []byte) (state.ValueKey, error) {
	var k state.ValueKey
	switch len(b) {
	case c.size:
	case c.size + windowLen:
		w, err := decodeWindow(b[c.size:])
		if err != nil {
			return k, err
		}
		k.NS, k.HasNS = [2]int64{w.Start, w.End}, true
	default:
		return k, fmt.Errorf("window: key of %d bytes is neither a record key of %d bytes nor one with a window", len(b), c.size)
	}
	if err := c.check(b[:c.size]); err != nil {
		return k, err
	}
	k.Key = recordKeyBits(b[:c.size])
	return k, nil
}

// recordKeyBits is the big-endian integer of a record key of 4 or 8 bytes.
func recordKeyBits(b []byte) uint64 {
	if len(b) == 8 {
		return binary.BigEndian.Uint64(b)
	}
	return uint64(binary.BigEndian.Uint32(b))
}

// hashKey places a key in the backend's tables: the xor of its parts, each
// times an odd constant; the table mixes the bits further.
func hashKey(k state.ValueKey) uint64 {
	h := k.Key * 0x9e3779b97f4a7c15
	if k.HasNS {
		h ^= uint64(k.NS[0])*0xc2b2ae3d27d4eb4f ^ uint64(k.NS[1])*0x165667b19e3779f9
	}
	return h
}

// valueKeys is the keyer on a state.ValueKeyBackend.
type valueKeys struct {
	size int
	set  func(state.ValueKey, int, uint64) error
	cur  state.ValueKey // the record key; cur.HasNS is false
}

func (t *valueKeys) setKey(key []byte) bool {
	// A key that came with an element was encoded by the record key
	// codec, and one the backend holds decoded with it when it switched
	// to keys by value, so the key's bytes are all there is to check.
	if len(key) != t.size {
		return false
	}
	t.cur.Key = recordKeyBits(key)
	return true
}

func (t *valueKeys) useKey(kg int) { mustSetKey(t.set(t.cur, kg, hashKey(t.cur))) }

func (t *valueKeys) useWindow(w Window, kg int) {
	k := t.cur
	if !w.global {
		k.NS, k.HasNS = [2]int64{w.Start, w.End}, true
	}
	mustSetKey(t.set(k, kg, hashKey(k)))
}

// mustSetKey checks the result of setting the backend's current key in a
// key group the core checked when the key came in (core.setKey): an
// error is a bug.
func mustSetKey(err error) {
	if err != nil {
		panic(fmt.Sprintf("window: key group checked on entry, refused by the backend: %v", err))
	}
}

// UseKeyCodec tells op the codec of its record keys, kc, which encoded
// the keys its elements come with. When op's backend holds keys by value
// (it implements state.ValueKeyBackend, as the heap backend does) and kc
// is a built-in integer codec, the backend then holds op's keys as values,
// which saves serializing and hashing a key (and its window) for every
// state access; otherwise nothing changes. The snapshot format is the same
// either way, so a job may restore from a snapshot taken with or without
// it. Call it right after New, before the first element.
func UseKeyCodec[K any, IN, OUT any](op *Operator[IN, OUT], kc codec.Codec[K]) error {
	b, ok := op.c.b.(state.ValueKeyBackend)
	if !ok {
		return nil
	}
	var size int
	switch any(kc).(type) {
	case codec.Int64Codec, codec.IntCodec, codec.Uint64Codec:
		size = 8
	case codec.Int32Codec, codec.Uint32Codec:
		size = 4
	default:
		return nil
	}
	c := windowKeyCodec{size: size, check: func(b []byte) error {
		_, err := kc.Decode(b)
		return err
	}}
	set, err := b.UseValueKeys(c, hashKey)
	if err != nil {
		return fmt.Errorf("window: the keys in the backend do not decode with the record key codec %T: %w", kc, err)
	}
	op.c.keys = &valueKeys{size: size, set: set}
	op.c.cur = keyUnset
	return nil
}
