package heap

import (
	"hash/maphash"
	"strings"
	"unsafe"

	"github.com/weirstream/weir/codec"
)

// keyOps converts a core's keys to and from their serialized form. Its
// methods but hash are safe for concurrent use (snapshots encode keys on
// another goroutine); hash is called by the task's goroutine only.
type keyOps[K comparable] interface {
	// appendKey appends the serialized form of k.
	appendKey(dst []byte, k K) []byte
	// view returns the key serialized as b; borrowed means it aliases b
	// and must be cloned before it is stored.
	view(b []byte) (k K, borrowed bool, err error)
	// clone returns a copy of a borrowed key that does not alias anything.
	clone(k K) K
	// hash places k in its table (table.index mixes it): for keys held as
	// integers the integer itself, for keys held as their serialized bytes
	// a hash of the bytes.
	hash(k K) uint64
}

// stringKeys holds keys as strings of their serialized bytes: the backend
// of byte keys, and the typed backend of string keys with codec.String
// (whose serialized form is the string's bytes).
type stringKeys struct{}

func (stringKeys) appendKey(dst []byte, k string) []byte { return append(dst, k...) }
func (stringKeys) view(b []byte) (string, bool, error) {
	return unsafe.String(unsafe.SliceData(b), len(b)), true, nil
}
func (stringKeys) clone(k string) string { return strings.Clone(k) }
func (stringKeys) hash(k string) uint64  { return maphash.String(tableSeed, k) }

// tableSeed seeds the hash of serialized keys. Tables live in memory only,
// so any seed will do.
var tableSeed = maphash.MakeSeed()

// codecKeys holds keys as values, serialized with a codec whose Decode
// does not alias its input. h places them: the integer itself for the
// built-in integer codecs, codec.HashFunc(c) for other codecs, or the
// function given to UseKeysHashed (given), whose values Keys.Set receives
// from its caller.
type codecKeys[K comparable] struct {
	c     codec.Codec[K]
	h     func(K) uint64
	given bool
}

func newCodecKeys[K comparable](c codec.Codec[K]) codecKeys[K] {
	return codecKeys[K]{c: c, h: placeHash(c)}
}

// placeHash returns the hash that places keys encoded with c in tables:
// for an integer codec the integer's bits, which cost nothing to compute
// (the keyed operators take the key group from the record or from the
// routing hash, not from this), and codec.HashFunc(c) otherwise.
func placeHash[K comparable](c codec.Codec[K]) func(K) uint64 {
	size := unsafe.Sizeof(*new(K))
	switch any(c).(type) {
	case codec.Int64Codec, codec.Uint64Codec, codec.IntCodec:
		if size == 8 {
			return func(k K) uint64 { return *(*uint64)(unsafe.Pointer(&k)) }
		}
	case codec.Int32Codec, codec.Uint32Codec:
		if size == 4 {
			return func(k K) uint64 { return uint64(*(*uint32)(unsafe.Pointer(&k))) }
		}
	}
	return codec.HashFunc(c)
}

func (o codecKeys[K]) appendKey(dst []byte, k K) []byte { return o.c.Append(dst, k) }
func (o codecKeys[K]) view(b []byte) (K, bool, error) {
	k, err := o.c.Decode(b)
	return k, false, err
}
func (o codecKeys[K]) clone(k K) K     { return k }
func (o codecKeys[K]) hash(k K) uint64 { return o.h(k) }
