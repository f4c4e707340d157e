package pebble

import (
	"fmt"
	"hash/maphash"
)

// slotIndex is the cache's index of its slots by key: open addressing with
// linear probing over a power-of-two table whose entries are
// tag<<32 | slot+1 (0: empty), tag being the high half of the key's hash
// and tag&mask the entry's home. It is at most half full, and a removal
// shifts the entries after it back (no tombstones), so that a lookup
// stops at the first empty entry.
//
// It replaces a map[string]int32, which a miss of the cache over pebble
// paid four times (a prefetch's check and insert, the record's lookup, a
// victim's delete) at a memory miss each for the map's group, the key and
// then the slot: here a lookup reads the table's entry and compares the
// key through the slot it names, which the caller reads anyway; a tag
// that differs spares the key.
type slotIndex struct {
	seed maphash.Seed
	tab  []uint64
	n    int
}

func newSlotIndex() slotIndex { return slotIndex{seed: maphash.MakeSeed()} }

func (x *slotIndex) tag(key string) uint32 { return uint32(maphash.String(x.seed, key) >> 32) }

// find returns the slot whose key is key, or -1.
func (x *slotIndex) find(key string, slots []centry) int32 {
	if x.n == 0 {
		return -1
	}
	tag := x.tag(key)
	mask := uint32(len(x.tab) - 1)
	for p := tag & mask; ; p = (p + 1) & mask {
		e := x.tab[p]
		if e == 0 {
			return -1
		}
		if uint32(e>>32) == tag {
			if i := int32(uint32(e)) - 1; slots[i].key == key {
				return i
			}
		}
	}
}

// add indexes slot i under key, which the index does not hold, and
// returns the key's tag (for remove).
func (x *slotIndex) add(key string, i int32) uint32 {
	if 2*(x.n+1) > len(x.tab) {
		x.grow()
	}
	tag := x.tag(key)
	x.put(uint64(tag)<<32 | uint64(uint32(i)+1))
	x.n++
	return tag
}

func (x *slotIndex) put(e uint64) {
	mask := uint32(len(x.tab) - 1)
	p := uint32(e>>32) & mask
	for x.tab[p] != 0 {
		p = (p + 1) & mask
	}
	x.tab[p] = e
}

func (x *slotIndex) grow() {
	old := x.tab
	x.tab = make([]uint64, max(16, 2*len(old)))
	for _, e := range old {
		if e != 0 {
			x.put(e)
		}
	}
}

// remove removes slot i, added with tag (what add returned): a victim's
// removal reads neither its key nor its hash.
func (x *slotIndex) remove(tag uint32, i int32) {
	want := uint64(tag)<<32 | uint64(uint32(i)+1)
	mask := uint32(len(x.tab) - 1)
	p := uint32(want>>32) & mask
	for n := 0; x.tab[p] != want; n++ {
		if x.tab[p] == 0 || n == len(x.tab) {
			panic(fmt.Sprintf("pebble: cache slot %d is not indexed", i))
		}
		p = (p + 1) & mask
	}
	// Shift back every later entry of the run that may sit at the hole:
	// one whose home is not between the hole and it.
	for q := p; ; {
		x.tab[p] = 0
		for {
			q = (q + 1) & mask
			e := x.tab[q]
			if e == 0 {
				x.n--
				return
			}
			if home := uint32(e>>32) & mask; (q-home)&mask >= (q-p)&mask {
				x.tab[p] = e
				p = q
				break
			}
		}
	}
}

// reset empties the index and frees its table, as the cache's reset
// does its slots.
func (x *slotIndex) reset() { x.tab, x.n = nil, 0 }
