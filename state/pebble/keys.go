package pebble

import (
	"encoding/binary"
	"fmt"
)

// The key layout. Every key of a key group lies in one contiguous range,
// so that a snapshot, a restore and a rescale each read a key group with
// one range scan:
//
//	data key  = group:u16be state:u32be uvarint(len(key)) key [userKey]   (userKey: map states only)
//	state key = 0xFF 0xFF 's' state:u32be  →  kind:u8 name              (the registry of states)
//
// Key groups are below MaxMaxParallelism = 2^15, so 0xFFFF never begins a
// data key. Because the serialized key is length-prefixed, the keys of one
// (group, state, key) are exactly those starting with its prefix.

const (
	groupLen  = 2
	stateLen  = 4
	headerLen = groupLen + stateLen
)

var registryPrefix = []byte{0xFF, 0xFF, 's'}

// appendGroupState appends the first six bytes of a data key.
func appendGroupState(dst []byte, group int, s uint32) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(group))
	return binary.BigEndian.AppendUint32(dst, s)
}

// appendPrefix appends the prefix of every data key of (group, s, key).
func appendPrefix(dst []byte, group int, s uint32, key []byte) []byte {
	dst = appendGroupState(dst, group, s)
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	return append(dst, key...)
}

// groupBounds returns the [lower, upper) bounds of key group g's keys.
func groupBounds(g int) (lower, upper []byte) {
	return binary.BigEndian.AppendUint16(nil, uint16(g)), binary.BigEndian.AppendUint16(nil, uint16(g+1))
}

// stateBounds returns the [lower, upper) bounds of state s's keys in key
// group g.
func stateBounds(g int, s uint32) (lower, upper []byte) {
	lower = appendGroupState(nil, g, s)
	if s == ^uint32(0) {
		return lower, binary.BigEndian.AppendUint16(nil, uint16(g+1))
	}
	return lower, appendGroupState(nil, g, s+1)
}

// successor returns the smallest key greater than every key with prefix p
// (p is never all 0xFF: it begins with a key group below 2^15).
func successor(p []byte) []byte {
	s := append([]byte(nil), p...)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] != 0xFF {
			s[i]++
			return s[:i+1]
		}
	}
	panic(fmt.Sprintf("pebble: no successor of %x", p))
}

// dataKey is a decoded data key; its slices alias the encoded key.
type dataKey struct {
	group   int
	state   uint32
	key     []byte
	userKey []byte
}

// parseDataKey decodes k.
func parseDataKey(k []byte) (dataKey, error) {
	if len(k) < headerLen {
		return dataKey{}, fmt.Errorf("pebble: data key %x too short", k)
	}
	d := dataKey{group: int(binary.BigEndian.Uint16(k)), state: binary.BigEndian.Uint32(k[groupLen:])}
	rest := k[headerLen:]
	n, w := binary.Uvarint(rest)
	if w <= 0 || uint64(len(rest)-w) < n {
		return dataKey{}, fmt.Errorf("pebble: data key %x: bad key length", k)
	}
	d.key = rest[w : w+int(n)]
	d.userKey = rest[w+int(n):]
	return d, nil
}

// registryKey returns the registry key of state s.
func registryKey(s uint32) []byte {
	return binary.BigEndian.AppendUint32(append([]byte(nil), registryPrefix...), s)
}
