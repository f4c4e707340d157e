package heap

import "unsafe"

// entry is the state of one key of a state of any kind but map: a 16-byte
// header followed, in the same allocation, by c bytes of which the first n
// are the value. One allocation per key, with no pointers for the garbage
// collector to scan, keeps an int64 key with an 8-byte value at about 60
// bytes of heap (see BenchmarkBytesPerKey).
type entry struct {
	version uint64 // the version at which the entry was written
	n, c    uint32 // value length, capacity
}

// entryHeader is the size of entry, where the value bytes begin.
const entryHeader = int(unsafe.Sizeof(entry{}))

// newEntry returns an empty entry at version with room for at least c
// value bytes.
func newEntry(version uint64, c int) *entry {
	words := (entryHeader + c + 7) / 8
	buf := make([]uint64, words)
	e := (*entry)(unsafe.Pointer(&buf[0]))
	e.version = version
	e.c = uint32(words*8 - entryHeader)
	return e
}

// value returns the value bytes (aliasing the entry).
func (e *entry) value() []byte {
	if e.c == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(e), entryHeader)), e.c)[:e.n:e.n]
}

// buf returns the entry's whole value capacity (aliasing the entry).
func (e *entry) buf() []byte {
	if e.c == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(e), entryHeader)), e.c)
}

// set replaces the value with v; len(v) must not exceed e.c.
func (e *entry) set(v []byte) {
	if len(v) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(e), entryHeader)), e.c), v)
	}
	e.n = uint32(len(v))
}

// add appends v to the value; e.n+len(v) must not exceed e.c.
func (e *entry) add(v []byte) {
	if len(v) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(e), entryHeader)), e.c)[e.n:], v)
	}
	e.n += uint32(len(v))
}

// mapEntry is the state of one key of a map state.
type mapEntry struct {
	version uint64
	sub     map[string][]byte // its values are never modified in place
}
