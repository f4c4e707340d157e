package pebble

import (
	"fmt"
	"strings"
	"unsafe"
)

// cache is the write-back cache of a Backend: the values of value, list,
// reducing and aggregating states by their data key (group | state |
// framed key), as the heap backend holds them, bounded in bytes. It is a
// pure data structure: it reads and writes nothing but memory, and hands
// the entries to write to pebble to its caller (evict, writeBack), which
// writes them in one batch.
//
// For every key, either the cache has an entry and the entry is the truth
// (a value, or absent), or it has none and pebble is. An entry is dirty
// when pebble does not yet have what it holds; a clean entry may be
// dropped at any time. Eviction is CLOCK (second chance): every access
// sets the entry's referenced bit, the hand clears it on its way and
// evicts the first entry it finds unreferenced.
//
// Its memory is its entries' accounted sizes (entrySize), at most limit
// once the caller has evicted, plus the slot array and the index, whose
// sizes follow the number of entries that fit in limit.
type cache struct {
	limit      int64 // bytes the entries may take
	dirtyLimit int64 // dirty bytes before a write-back

	bytes, dirtyBytes int64

	idx   slotIndex // data key → slot
	slots []centry
	free  []int32 // unused slots
	hand  int     // the clock hand, an index into slots

	// dirty lists the slots that became dirty since the last write-back,
	// each once (centry.listed); a slot evicted or reused since is
	// checked again at the write-back.
	dirty []int32

	victims         []int32   // evict's scratch
	order, orderTmp []sortKey // sortSlots' scratch
}

// sortSlots sorts slots by their keys. Comparing the keys through the
// slots (strings.Compare on each key's bytes, wherever they are in
// memory) took most of a write-back of 100,000 entries; the prefixes,
// copied once into one array, order almost every pair without touching
// the keys.
func (c *cache) sortSlots(list []int32) {
	c.order = c.order[:0]
	for _, i := range list {
		c.order = append(c.order, newSortKey(c.slots[i].key, i))
	}
	c.orderTmp = sortKeys(c.order, c.orderTmp, func(a, b int32) int {
		return strings.Compare(c.slots[a].key, c.slots[b].key)
	})
	for n, o := range c.order {
		list[n] = o.slot
	}
	if cap(c.order) > 1<<16 && len(c.order) < cap(c.order)/4 {
		// do not keep a snapshot's scratch for small rounds
		c.order, c.orderTmp = nil, nil
	}
}

// centry is one slot of the cache.
type centry struct {
	key  string // "" with used false: a free slot
	val  []byte // the value, if present
	size int64  // the accounted size (entrySize), 0 when unused
	tag  uint32 // the key's tag in the index

	used    bool
	present bool // false: the key has no value (a tombstone when dirty)
	dirty   bool
	ref     bool // the CLOCK's referenced bit
	listed  bool // the slot is in cache.dirty
	victim  bool // chosen by the running eviction
}

// entryOverhead is what an entry costs beyond its key and value bytes: its
// slot (centry, 64 bytes), its index entries (8 bytes each, two to four
// of them: the index is a quarter to half full) and the allocation
// headers and rounding of the key and the value.
const entryOverhead = 128

func entrySize(key string, val []byte) int64 {
	return entryOverhead + int64(len(key)) + int64(cap(val))
}

func newCache(limit, dirtyLimit int64) *cache {
	return &cache{limit: limit, dirtyLimit: dirtyLimit, idx: newSlotIndex()}
}

// lookup returns the slot of key and marks it referenced, or -1.
func (c *cache) lookup(key []byte) int32 {
	i := c.idx.find(unsafe.String(unsafe.SliceData(key), len(key)), c.slots)
	if i >= 0 {
		c.slots[i].ref = true
	}
	return i
}

// holds reports whether the cache has an entry for key, without marking
// it referenced.
func (c *cache) holds(key []byte) bool {
	return c.idx.find(unsafe.String(unsafe.SliceData(key), len(key)), c.slots) >= 0
}

// all calls fn for every present entry until fn returns false.
func (c *cache) all(fn func(key string, val []byte) bool) {
	for i := range c.slots {
		if e := &c.slots[i]; e.used && e.present && !fn(e.key, e.val) {
			return
		}
	}
}

// at returns slot i; the pointer is valid until the next insert.
func (c *cache) at(i int32) *centry { return &c.slots[i] }

// insert adds key, which the cache must not hold, with a copy of val
// (present) or absent, clean or dirty, and returns its slot.
func (c *cache) insert(key []byte, val []byte, present, dirty bool) int32 {
	var i int32
	if n := len(c.free); n > 0 {
		i, c.free = c.free[n-1], c.free[:n-1]
	} else {
		c.slots = append(c.slots, centry{})
		i = int32(len(c.slots) - 1)
	}
	e := &c.slots[i]
	e.used, e.ref, e.present = true, true, present
	// One allocation holds the key and the value behind it: a miss
	// allocates once. The value's capacity ends where the buffer does, so
	// that appending to it (Update, Append) never touches the key; a
	// value that outgrows it moves to its own allocation.
	// (The first value's bytes then stay allocated, unaccounted, until
	// the entry goes: a few bytes, as the allocator's rounding.)
	if !present {
		val = nil
	}
	buf := make([]byte, len(key)+len(val))
	copy(buf, key)
	e.key = unsafe.String(unsafe.SliceData(buf), len(key))
	e.val = nil
	if present {
		copy(buf[len(key):], val)
		e.val = buf[len(key):len(buf):len(buf)]
	}
	e.size = entrySize(e.key, e.val)
	c.bytes += e.size
	e.tag = c.idx.add(e.key, i)
	if dirty {
		c.markDirty(i)
	}
	return i
}

// markDirty makes slot i dirty.
func (c *cache) markDirty(i int32) {
	e := &c.slots[i]
	if !e.dirty {
		e.dirty = true
		c.dirtyBytes += e.size
	}
	if !e.listed {
		e.listed = true
		c.dirty = append(c.dirty, i)
	}
}

// resize accounts slot i's value after it changed in place or was
// replaced (e.val set by the caller).
func (c *cache) resize(i int32) {
	e := &c.slots[i]
	n := entrySize(e.key, e.val)
	c.bytes += n - e.size
	if e.dirty {
		c.dirtyBytes += n - e.size
	}
	e.size = n
}

// set replaces slot i's value with a copy of val and makes it dirty.
func (c *cache) set(i int32, val []byte) {
	e := &c.slots[i]
	if cap(e.val) >= len(val) && cap(e.val) <= 2*len(val)+16 {
		e.val = append(e.val[:0], val...)
	} else {
		e.val = append(make([]byte, 0, len(val)), val...)
	}
	e.present = true
	c.resize(i)
	c.markDirty(i)
}

// remove makes slot i absent (a tombstone until written back).
func (c *cache) remove(i int32) {
	e := &c.slots[i]
	e.present, e.val = false, nil
	c.resize(i)
	c.markDirty(i)
}

// overLimit reports whether the caller must evict.
func (c *cache) overLimit() bool { return c.bytes > c.limit }

// overDirty reports whether the caller must write back.
func (c *cache) overDirty() bool { return c.dirtyBytes > c.dirtyLimit }

// evict evicts entries, never slot keep (-1: none), until the entries take
// at most 15/16 of limit (so that an eviction round frees room for many
// inserts); it calls write for each dirty victim, in key order, before it
// drops them. write must copy what it keeps. If write fails, evict stops
// writing and returns the error, the victims dropped: the caller fails the
// backend.
func (c *cache) evict(keep int32, write func(key string, val []byte, present bool) error) error {
	target := c.limit - c.limit/16
	var freed int64
	c.victims = c.victims[:0]
	// Two sweeps at most: the first may only clear referenced bits.
	for scanned := 0; c.bytes-freed > target && scanned <= 2*len(c.slots); scanned++ {
		if c.hand >= len(c.slots) {
			c.hand = 0
		}
		i := int32(c.hand)
		c.hand++
		e := &c.slots[i]
		if !e.used || e.victim || i == keep {
			continue
		}
		if e.ref {
			e.ref = false
			continue
		}
		e.victim = true
		freed += e.size
		c.victims = append(c.victims, i)
	}
	// Written in key order: pebble's memtable inserts sorted keys faster.
	c.sortSlots(c.victims)
	var err error
	for _, i := range c.victims {
		e := &c.slots[i]
		if e.dirty && err == nil {
			err = write(e.key, e.val, e.present)
		}
		c.drop(i)
	}
	c.victims = c.victims[:0]
	return err
}

// drop frees slot i.
func (c *cache) drop(i int32) {
	e := &c.slots[i]
	c.idx.remove(e.tag, i)
	c.bytes -= e.size
	if e.dirty {
		c.dirtyBytes -= e.size
	}
	listed := e.listed
	*e = centry{listed: listed}
	c.free = append(c.free, i)
}

// writeBack calls write for every dirty entry, in key order, and makes
// them clean. If write fails it returns the error; the entries not
// written yet stay dirty.
func (c *cache) writeBack(write func(key string, val []byte, present bool) error) error {
	list := c.dirty[:0]
	for _, i := range c.dirty {
		e := &c.slots[i]
		e.listed = false
		if e.used && e.dirty {
			list = append(list, i)
		}
	}
	c.sortSlots(list)
	for n, i := range list {
		e := &c.slots[i]
		if err := write(e.key, e.val, e.present); err != nil {
			// Keep the rest listed for the next write-back.
			rest := list[n:]
			for _, j := range rest {
				c.slots[j].listed = true
			}
			c.dirty = append(c.dirty[:0], rest...)
			return err
		}
		e.dirty = false
		c.dirtyBytes -= e.size
	}
	c.dirty = c.dirty[:0]
	return nil
}

// reset drops every entry, dirty ones included.
func (c *cache) reset() {
	c.idx.reset()
	c.slots, c.free, c.dirty, c.victims, c.order, c.hand = nil, nil, nil, nil, nil, 0
	c.bytes, c.dirtyBytes = 0, 0
}

// check panics if the accounting is broken (tests call it).
func (c *cache) check() {
	var bytes, dirty int64
	used := 0
	for i := range c.slots {
		e := &c.slots[i]
		if !e.used {
			continue
		}
		used++
		if e.size != entrySize(e.key, e.val) {
			panic(fmt.Sprintf("pebble: cache slot %d: size %d, entry %d", i, e.size, entrySize(e.key, e.val)))
		}
		if j := c.idx.find(e.key, c.slots); j != int32(i) {
			panic(fmt.Sprintf("pebble: cache slot %d not indexed (%d)", i, j))
		}
		if e.dirty && !e.listed {
			panic(fmt.Sprintf("pebble: cache slot %d dirty but not listed", i))
		}
		bytes += e.size
		if e.dirty {
			dirty += e.size
		}
	}
	if used != c.idx.n || bytes != c.bytes || dirty != c.dirtyBytes {
		panic(fmt.Sprintf("pebble: cache accounting: %d used, %d indexed, %d bytes (counted %d), %d dirty (counted %d)",
			used, c.idx.n, c.bytes, bytes, c.dirtyBytes, dirty))
	}
}
