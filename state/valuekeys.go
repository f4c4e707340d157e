package state

import "github.com/weirstream/weir/codec"

// ValueKey is a key that a keyed backend holds as a Go value rather than
// as its serialized bytes (see ValueKeyBackend): a record key of at most 8
// bytes, as the big-endian integer of those bytes, alone or with a
// namespace of two int64s (the window operator's time window, Start and
// End). Two ValueKeys are == exactly when their serialized forms are equal.
type ValueKey struct {
	Key   uint64
	NS    [2]int64
	HasNS bool
}

// ValueKeyBackend is implemented by keyed backends that can hold their keys
// as ValueKeys (the heap backend does), so that an operator with integer
// keys sets its current key with no serialization of the key and no hash
// of its bytes. An operator uses it when its backend has it and falls back
// to SetCurrentKey otherwise; the snapshot format is the same either way.
type ValueKeyBackend interface {
	// UseValueKeys switches the backend to holding its keys as ValueKeys,
	// encoded and decoded with kc (injectively: Decode accepts exactly the
	// encodings Append produces, and every key the backend already holds,
	// after a restore, must decode, or UseValueKeys fails) and placed in
	// the backend's tables by hash (any function of a key that agrees with
	// ==). It returns the setter of the current key, which is to be given
	// hash(key), and refuses a key group outside the backend's range with a
	// *KeyGroupError. Everything else (SetCurrentKey, CurrentKey, Entries,
	// snapshots) goes on with serialized keys. It is called once, before
	// the state is used.
	UseValueKeys(kc codec.Codec[ValueKey], hash func(ValueKey) uint64) (set func(key ValueKey, keyGroup int, hash uint64) error, err error)
}
