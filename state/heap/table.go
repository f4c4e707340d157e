package heap

// table maps the keys of one (state, key group) to their entries: an open
// addressing hash table with linear probing over a flat array. The caller
// supplies each key's hash (keyOps.hash: for integer keys the integer
// itself, so a lookup hashes nothing; index mixes it). Deletion shifts the following slots back, so
// there are no tombstones.
//
// Slots are {key, entry pointer}: 16 bytes for an int64 key. The table
// doubles when it is three quarters full, which keeps it between 3/8 and
// 3/4 full once it has grown.
//
// A table is a value; copies share the slot array. The core's copy-on-write
// rule (a table a live snapshot holds is cloned before any insertion or
// deletion) is what makes sharing safe.
type table[K comparable] struct {
	slots []slot[K] // nil or a power-of-two length
	n     int
}

type slot[K comparable] struct {
	k K
	e *entry // nil: the slot is free
}

// minTableSize is the size of a table's first slot array.
const minTableSize = 8

// mix spreads a key's hash over the table index's bits: the high ones of a
// multiplication by an odd constant (Fibonacci hashing), so that integer
// keys placed by their own value spread, consecutive or not. The key group
// is the same for all the keys of a table; it comes from the routing hash
// (codec.Hash64), of which this hash knows nothing.
func mix(h uint64) uint64 { return (h ^ h>>29) * 0x9e3779b97f4a7c15 }

func (t *table[K]) index(h uint64) int {
	return int(mix(h) >> 32 & uint64(len(t.slots)-1))
}

// get returns the entry of k, whose hash is h (nil if none).
func (t *table[K]) get(k K, h uint64) *entry {
	if t.n == 0 {
		return nil
	}
	mask := len(t.slots) - 1
	for i := t.index(h); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == nil {
			return nil
		}
		if s.k == k {
			return s.e
		}
	}
}

// put maps k (hash h) to e, replacing its entry if it has one.
func (t *table[K]) put(k K, h uint64, e *entry, hash func(K) uint64) {
	if t.n+1 > len(t.slots)*3/4 {
		t.grow(hash)
	}
	mask := len(t.slots) - 1
	for i := t.index(h); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == nil {
			s.k, s.e = k, e
			t.n++
			return
		}
		if s.k == k {
			s.e = e
			return
		}
	}
}

// del removes k (hash h); it reports whether k was there.
func (t *table[K]) del(k K, h uint64, hash func(K) uint64) bool {
	if t.n == 0 {
		return false
	}
	mask := len(t.slots) - 1
	i := t.index(h)
	for ; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == nil {
			return false
		}
		if s.k == k {
			break
		}
	}
	// Backward shift: move each following slot of the probe run whose home
	// is not in (i, j] into the hole, until a free slot ends the run.
	for j := (i + 1) & mask; t.slots[j].e != nil; j = (j + 1) & mask {
		home := t.index(hash(t.slots[j].k))
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot[K]{}
	t.n--
	return true
}

// grow doubles the slot array (or allocates the first one).
func (t *table[K]) grow(hash func(K) uint64) {
	old := t.slots
	t.slots = make([]slot[K], max(minTableSize, 2*len(old)))
	mask := len(t.slots) - 1
	for _, s := range old {
		if s.e == nil {
			continue
		}
		i := t.index(hash(s.k))
		for t.slots[i].e != nil {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// clone returns a table with the same mappings and its own slot array.
func (t table[K]) clone() table[K] {
	if t.slots == nil {
		return t
	}
	return table[K]{slots: append([]slot[K](nil), t.slots...), n: t.n}
}

// all calls fn for every mapping until fn returns false.
func (t *table[K]) all(fn func(k K, e *entry) bool) {
	for i := range t.slots {
		if s := &t.slots[i]; s.e != nil && !fn(s.k, s.e) {
			return
		}
	}
}
