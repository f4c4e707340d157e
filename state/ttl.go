package state

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/weirstream/weir/codec"
)

// TTL configures the time-to-live of a keyed state's values (Flink's state
// TTL with processing time, updated on create and write, expired values
// never returned). A zero TTL keeps values forever.
//
// With a TTL, every value (a list's every element, a map's every entry)
// is stored with its expiration time, set to now + TTL when it is written.
// Reads treat an expired value as absent (a value state's expired value is
// deleted on read); full snapshots leave expired values out, so a restore
// drops them. An incremental snapshot keeps them until they are read or a
// full snapshot is taken (pebble has no compaction filter).
//
// The stored bytes differ with and without a TTL: a state must not change
// between the two across a restore.
type TTL struct {
	// TTL is how long a value lives after its last write.
	TTL time.Duration
	// Now is the processing-time clock; nil means time.Now.
	Now func() time.Time
}

func (t TTL) enabled() bool { return t.TTL > 0 }

func (t TTL) nowMillis() int64 {
	if t.Now != nil {
		return t.Now().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// errExpired is returned by a TTL codec's Decode for an expired value.
var errExpired = errors.New("state: expired")

// ttlCodec stores a value as expiry-unix-ms:u64le | inner encoding.
type ttlCodec[T any] struct {
	inner codec.Codec[T]
	ttl   TTL
}

func (c ttlCodec[T]) Append(dst []byte, v T) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(c.ttl.nowMillis()+c.ttl.TTL.Milliseconds()))
	return c.inner.Append(dst, v)
}

func (c ttlCodec[T]) Decode(src []byte) (T, error) {
	var zero T
	if len(src) < 8 {
		return zero, ErrCorruptState
	}
	if int64(binary.LittleEndian.Uint64(src)) <= c.ttl.nowMillis() {
		return zero, errExpired
	}
	return c.inner.Decode(src[8:])
}

// withTTL wraps c when ttl is enabled.
func withTTL[T any](c codec.Codec[T], ttl TTL) codec.Codec[T] {
	if !ttl.enabled() || c == nil {
		return c
	}
	return ttlCodec[T]{inner: c, ttl: ttl}
}

// TTLBackend is implemented by keyed backends that leave expired values
// out of their full snapshots: the typed states call EnableTTL for each
// state with a TTL, with the state's clock in unix milliseconds (safe for
// concurrent use).
type TTLBackend interface {
	EnableTTL(s StateID, nowMillis func() int64)
}

func enableTTL(b KeyedBackend, id StateID, ttl TTL) {
	if !ttl.enabled() {
		return
	}
	if tb, ok := b.(TTLBackend); ok {
		tb.EnableTTL(id, ttl.nowMillis)
	}
}

// DropExpired returns value without what expired at nowMillis, for a state
// of kind with a TTL, and whether anything is left: backends call it when
// they write a full snapshot. A value it cannot parse is kept as it is.
func DropExpired(kind Kind, nowMillis int64, value []byte) ([]byte, bool) {
	live := func(v []byte) bool {
		return len(v) < 8 || int64(binary.LittleEndian.Uint64(v)) > nowMillis
	}
	if kind != KindList {
		return value, live(value)
	}
	// A list: keep the elements that live.
	rest, out, dropped := value, value[:0:0], false
	for len(rest) > 0 {
		e, r, err := splitFramed(rest)
		if err != nil {
			return value, true
		}
		if live(e) {
			out = appendFramed(out, e)
		} else {
			dropped = true
		}
		rest = r
	}
	if !dropped {
		return value, true
	}
	return out, len(out) > 0
}
