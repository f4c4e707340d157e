package eventtime

import (
	"bytes"
	"hash/maphash"
)

// timerKeyTable is the intern table of a TimerService: record key →
// *timerKey. It is an open-addressing hash table with linear probing
// whose slots hold a key's hash and record; a lookup compares the key
// with the record's own copy (inline in the record for short keys). So a
// lookup touches one slot and the record, which registering reads anyway,
// where a map[string]*timerKey also reads its own copy of the key, kept
// elsewhere.
type timerKeyTable struct {
	seed  maphash.Seed
	slots []timerKeySlot // a power of two of them, at most half used
	n     int
}

type timerKeySlot struct {
	hash uint64
	k    *timerKey // nil: the slot is free
}

// timerKeyTableMin is the smallest number of slots.
const timerKeyTableMin = 16

func newTimerKeyTable() timerKeyTable {
	return timerKeyTable{seed: maphash.MakeSeed()}
}

func (t *timerKeyTable) len() int { return t.n }

func (t *timerKeyTable) hash(key []byte) uint64 { return maphash.Bytes(t.seed, key) }

// find returns the record of key, whose hash is h, or nil.
func (t *timerKeyTable) find(h uint64, key []byte) *timerKey {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.k == nil {
			return nil
		}
		if s.hash == h && bytes.Equal(s.k.key(), key) {
			return s.k
		}
	}
}

// insert adds k, whose key (of hash h) is not in the table.
func (t *timerKeyTable) insert(h uint64, k *timerKey) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	t.place(timerKeySlot{h, k})
	t.n++
}

func (t *timerKeyTable) place(s timerKeySlot) {
	mask := uint64(len(t.slots) - 1)
	i := s.hash & mask
	for t.slots[i].k != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = s
}

func (t *timerKeyTable) grow() {
	old := t.slots
	t.slots = make([]timerKeySlot, max(timerKeyTableMin, 2*len(old)))
	for _, s := range old {
		if s.k != nil {
			t.place(s)
		}
	}
}

// remove removes k, whose key has hash h, from the table. The slots after
// it that would not be found past the freed one move back into it (Knuth's
// algorithm R), so that no tombstone lengthens later lookups.
func (t *timerKeyTable) remove(h uint64, k *timerKey) {
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i].k != k {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; t.slots[j].k != nil; j = (j + 1) & mask {
		// The entry at j stays if its home slot is cyclically in (i, j].
		h := t.slots[j].hash & mask
		if (i < j && i < h && h <= j) || (j < i && (i < h || h <= j)) {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = timerKeySlot{}
	t.n--
}
