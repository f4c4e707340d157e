package heap

import (
	"fmt"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
)

// Keys sets the current key of a Backend by value, after UseKeys: the
// keyed operators' per-record path, with no serialization of the key and
// one map lookup on a K per state access.
type Keys[K comparable] struct {
	b     *Backend
	c     *core[K]
	start int
	n     uint
	// hashed: the core places keys by UseKeysHashed's function, whose
	// value Set is given.
	hashed bool
}

// Set sets the current key to key in key group keyGroup, as SetCurrentKey
// does with key's serialized form. hash is used after UseKeysHashed only:
// it is then the hash function's value for key (UseKeys places keys by a
// hash of its own). A key group outside the backend's range is refused
// with a *state.KeyGroupError, as in SetCurrentKey.
func (k *Keys[K]) Set(key K, keyGroup int, hash uint64) error {
	g := keyGroup - k.start
	if uint(g) >= k.n {
		return &state.KeyGroupError{Group: keyGroup, Range: k.b.rng}
	}
	if !k.hashed {
		hash = k.c.ops.hash(key)
	}
	k.c.setKey(key, g, hash)
	return nil
}

// SetKey is Set for keys placed by UseKeys' own hash.
func (k *Keys[K]) SetKey(key K, keyGroup int) error { return k.Set(key, keyGroup, 0) }

func newKeys[K comparable](b *Backend, c *core[K]) *Keys[K] {
	o, ok := c.ops.(codecKeys[K])
	return &Keys[K]{b: b, c: c, start: b.rng.Start, n: uint(b.rng.Len()), hashed: ok && o.given}
}

// UseKeys switches b to holding its keys as values of type K and returns
// the setter of its current key. kc must encode injectively and agree with
// ==: two keys are == exactly when their encodings are equal, and Decode
// accepts exactly the encodings Append produces (this is checked for every
// key b already holds, after a restore). The built-in integer codecs and
// codec.String qualify; floats, for instance, do not (NaN, -0).
//
// Nothing else changes: SetCurrentKey (serialized keys decode with kc),
// CurrentKey, Entries and snapshots go on with serialized keys, in the same
// snapshot format. UseKeys is called before the state is used, typically
// right after Restore; calling it again with the same K returns a setter
// of the same keys.
func UseKeys[K comparable](b *Backend, kc codec.Codec[K]) (*Keys[K], error) {
	return useKeys(b, kc, nil)
}

// UseKeysHashed is UseKeys with hash, rather than UseKeys' own hash,
// placing the keys in b's tables: any function of a key that agrees with
// == will do, since it never leaves memory. Keys.Set must then be given
// hash(key). It suits composite keys (a record key with a namespace) whose
// hash is cheap to derive from their parts. It is called once per backend.
func UseKeysHashed[K comparable](b *Backend, kc codec.Codec[K], hash func(K) uint64) (*Keys[K], error) {
	if hash == nil {
		return nil, fmt.Errorf("heap: UseKeysHashed without a hash function")
	}
	return useKeys(b, kc, hash)
}

func useKeys[K comparable](b *Backend, kc codec.Codec[K], hash func(K) uint64) (*Keys[K], error) {
	if b.closed {
		return nil, fmt.Errorf("heap: UseKeys on a closed backend")
	}
	if c, ok := b.s.(*core[K]); ok {
		if _, ok := any(kc).(codec.StringCodec); ok || !isStringKeys(c.ops) {
			return newKeys(b, c), nil
		}
	}
	from, ok := b.s.(*core[string])
	if !ok || !isStringKeys(from.ops) {
		return nil, fmt.Errorf("heap: UseKeys[%T]: the backend already holds keys of another type", *new(K))
	}
	ops := newCodecKeys(kc)
	if hash != nil {
		ops.h, ops.given = hash, true
	}
	to, err := convert[K](from, ops)
	if err != nil {
		return nil, err
	}
	b.s = to
	return newKeys(b, to), nil
}

func isStringKeys(o any) bool {
	_, ok := o.(stringKeys)
	return ok
}

var _ store = (*core[int64])(nil)

// KeySetter returns a function setting the current key of b by value, for
// a keyed operator with keys of type K encoded with kc: when b is a
// *Backend and kc a codec whose encoding agrees with == (the built-in
// integer codecs, codec.String), it switches b with UseKeys and returns
// the Keys' SetKey; otherwise it returns nil, and the caller sets
// serialized keys with SetCurrentKey.
func KeySetter[K any](b state.KeyedBackend, kc codec.Codec[K]) (func(key K, keyGroup int) error, error) {
	hb, ok := b.(*Backend)
	if !ok {
		return nil, nil
	}
	switch any(kc).(type) {
	case codec.Int64Codec:
		return setter[int64, K](hb, codec.Int64())
	case codec.IntCodec:
		return setter[int, K](hb, codec.Int())
	case codec.Int32Codec:
		return setter[int32, K](hb, codec.Int32())
	case codec.Uint64Codec:
		return setter[uint64, K](hb, codec.Uint64())
	case codec.Uint32Codec:
		return setter[uint32, K](hb, codec.Uint32())
	case codec.StringCodec:
		return setter[string, K](hb, codec.String())
	}
	return nil, nil
}

// setter returns UseKeys(b, c).SetKey as a func(K, int); KC is K.
func setter[KC comparable, K any](b *Backend, c codec.Codec[KC]) (func(K, int) error, error) {
	keys, err := UseKeys(b, c)
	if err != nil {
		return nil, err
	}
	f, ok := any(keys.SetKey).(func(K, int) error)
	if !ok {
		return nil, nil
	}
	return f, nil
}

// UseValueKeys implements state.ValueKeyBackend: UseKeysHashed with
// state.ValueKeys, returning the Keys' Set.
func (b *Backend) UseValueKeys(kc codec.Codec[state.ValueKey], hash func(state.ValueKey) uint64) (func(state.ValueKey, int, uint64) error, error) {
	keys, err := UseKeysHashed(b, kc, hash)
	if err != nil {
		return nil, err
	}
	return keys.Set, nil
}

var _ state.ValueKeyBackend = (*Backend)(nil)
