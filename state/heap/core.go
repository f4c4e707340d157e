package heap

import (
	"fmt"
	"maps"
	"unsafe"

	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

// store is the key-dependent part of a Backend: a core over some key type.
// A Backend validates state IDs before calling it.
type store interface {
	addState(meta state.StateMeta)
	setKeyBytes(key []byte, group int)
	unsetKey()
	currentKey() ([]byte, int)
	get(s state.StateID, userKey []byte) ([]byte, bool, error)
	put(s state.StateID, userKey, value []byte) error
	appendValue(s state.StateID, value []byte) error
	update(s state.StateID, fn state.UpdateFunc) error
	del(s state.StateID, userKey []byte) error
	clear(s state.StateID) error
	iterate(s state.StateID, fn func(userKey, value []byte) bool) error
	entries(s state.StateID, fn func(key []byte, keyGroup int, userKey, value []byte) bool)
	numEntries(s state.StateID) int
	capture() capturedFunc
	clearAll()
}

// capturedFunc calls fn for every entry of state i in key group index j
// of a snapshot (me non-nil for map states), with the key serialized.
type capturedFunc func(i, j int, fn func(key []byte, e *entry, me *mapEntry) error) error

// core holds the states of a Backend with keys of type K: for each
// (state, key group) a Go map from key to entry.
type core[K comparable] struct {
	ops    keyOps[K]
	rng    keygroup.Range
	v      *versions
	states []*kvState[K]

	cur        K
	curHash    uint64 // ops.hash(cur), if curHashOK
	curHashOK  bool
	borrowed   bool   // cur aliases curBytes (clone before storing it)
	curBytes   []byte // cur serialized, when curBytesOK
	curBytesOK bool
	curGroup   int // index into a kvState's groups, -1 if unset

	// last caches the entry of (lastState, current key) found by the last
	// lookup, so that a Get+Put pair finds the key once. Invalidated by
	// every change of the current key and of the entry the key maps to.
	last      *entry
	lastMap   *mapEntry
	lastState state.StateID
	lastOK    bool

	scratch []byte // update's new values that do not go in place
}

type kvState[K comparable] struct {
	meta   state.StateMeta
	groups []group[K]
}

type group[K comparable] struct {
	m       table[K]        // every kind but map
	mm      map[K]*mapEntry // map states
	created uint64          // version at which m (mm) became the live object
}

func newCore[K comparable](ops keyOps[K], rng keygroup.Range, v *versions) *core[K] {
	return &core[K]{ops: ops, rng: rng, v: v, curGroup: -1}
}

func (c *core[K]) addState(meta state.StateMeta) {
	c.states = append(c.states, &kvState[K]{meta: meta, groups: make([]group[K], c.rng.Len())})
}

func (c *core[K]) setKeyBytes(key []byte, group int) {
	c.curBytes = append(c.curBytes[:0], key...)
	k, borrowed, err := c.ops.view(c.curBytes)
	if err != nil {
		panic(fmt.Sprintf("heap: key %x does not decode with the backend's key codec: %v", key, err))
	}
	c.cur, c.borrowed, c.curBytesOK = k, borrowed, true
	// Hashed at the first state access: a key set only for CurrentKey
	// (the timer service registering a timer, or firing one whose
	// function reads no state) is not hashed at all.
	c.curHashOK = false
	c.curGroup = group
	c.lastOK = false
}

// hash returns the current key's hash.
func (c *core[K]) hash() uint64 {
	if !c.curHashOK {
		c.curHash, c.curHashOK = c.ops.hash(c.cur), true
	}
	return c.curHash
}

func (c *core[K]) unsetKey() {
	var zero K
	c.cur, c.borrowed, c.curBytesOK = zero, false, false
	c.curGroup = -1
	c.lastOK = false
}

// setKey sets the current key by value; h is ops.hash(k).
func (c *core[K]) setKey(k K, group int, h uint64) {
	c.cur, c.curHash, c.curHashOK, c.borrowed, c.curBytesOK = k, h, true, false, false
	c.curGroup = group
	c.lastOK = false
}

func (c *core[K]) currentKey() ([]byte, int) {
	if c.curGroup < 0 {
		return nil, -1
	}
	if !c.curBytesOK {
		c.curBytes = c.ops.appendKey(c.curBytes[:0], c.cur)
		c.curBytesOK = true
	}
	return c.curBytes, c.curGroup
}

// ownedKey returns the current key for storing in a map, no longer
// aliasing the backend's scratch.
func (c *core[K]) ownedKey() K {
	if c.borrowed {
		c.cur, c.borrowed = c.ops.clone(c.cur), false
	}
	return c.cur
}

func (c *core[K]) group(s state.StateID) (*kvState[K], *group[K], error) {
	st := c.states[s]
	if c.curGroup < 0 {
		return nil, nil, fmt.Errorf("heap: state %q accessed without a current key", st.meta.Name)
	}
	return st, &st.groups[c.curGroup], nil
}

// lookup returns the current key's entry of state s (nil if none).
func (c *core[K]) lookup(s state.StateID, g *group[K]) *entry {
	if c.lastOK && c.lastState == s {
		return c.last
	}
	e := g.m.get(c.cur, c.hash())
	c.last, c.lastMap, c.lastState, c.lastOK = e, nil, s, true
	return e
}

// lookupMap is lookup for map states.
func (c *core[K]) lookupMap(s state.StateID, g *group[K]) *mapEntry {
	if c.lastOK && c.lastState == s {
		return c.lastMap
	}
	e := g.mm[c.cur]
	c.last, c.lastMap, c.lastState, c.lastOK = nil, e, s, true
	return e
}

// frozen reports whether a live snapshot holds g's map objects, which must
// then be cloned before a structural write.
func (c *core[K]) frozen(g *group[K], required uint64) bool { return required >= g.created }

// install makes e the current key's entry of state s.
func (c *core[K]) install(s state.StateID, g *group[K], e *entry, required uint64) {
	if g.m.slots == nil {
		g.created = c.v.version
	} else if c.frozen(g, required) {
		g.m, g.created = g.m.clone(), c.v.version
	}
	g.m.put(c.ownedKey(), c.hash(), e, c.ops.hash)
	c.last, c.lastMap, c.lastState, c.lastOK = e, nil, s, true
}

// installMap is install for map states.
func (c *core[K]) installMap(s state.StateID, g *group[K], e *mapEntry, required uint64) {
	if g.mm == nil {
		g.mm, g.created = make(map[K]*mapEntry), c.v.version
	} else if c.frozen(g, required) {
		g.mm, g.created = maps.Clone(g.mm), c.v.version
	}
	g.mm[c.ownedKey()] = e
	c.last, c.lastMap, c.lastState, c.lastOK = nil, e, s, true
}

// writableMapEntry returns the current key's map entry ready for
// modification: the existing one if no live snapshot holds it, else a copy
// at the current version; with create, a missing entry is created.
func (c *core[K]) writableMapEntry(s state.StateID, g *group[K], create bool) *mapEntry {
	required := c.v.required.Load()
	e := c.lookupMap(s, g)
	if e != nil && e.version > required {
		return e
	}
	if e == nil && !create {
		return nil
	}
	ne := &mapEntry{version: c.v.version}
	if e != nil {
		ne.sub = maps.Clone(e.sub)
	} else {
		ne.sub = map[string][]byte{}
	}
	c.installMap(s, g, ne, required)
	return ne
}

func (c *core[K]) get(s state.StateID, userKey []byte) ([]byte, bool, error) {
	st, g, err := c.group(s)
	if err != nil {
		return nil, false, err
	}
	if st.meta.Kind == state.KindMap {
		e := c.lookupMap(s, g)
		if e == nil {
			return nil, false, nil
		}
		v, ok := e.sub[string(userKey)]
		return v, ok, nil
	}
	e := c.lookup(s, g)
	if e == nil {
		return nil, false, nil
	}
	return e.value(), true, nil
}

func (c *core[K]) put(s state.StateID, userKey, value []byte) error {
	st, g, err := c.group(s)
	if err != nil {
		return err
	}
	if st.meta.Kind == state.KindMap {
		e := c.writableMapEntry(s, g, true)
		e.sub[string(userKey)] = append([]byte{}, value...)
		return nil
	}
	// Hot path: an existing entry no snapshot holds is overwritten in place.
	required := c.v.required.Load()
	if e := c.lookup(s, g); e != nil && e.version > required && len(value) <= int(e.c) {
		e.set(value)
		return nil
	}
	ne := newEntry(c.v.version, len(value))
	ne.set(value)
	c.install(s, g, ne, required)
	return nil
}

// update is get and put with one lookup, writing in place when the
// entry is the live version's and the new value fits.
func (c *core[K]) update(s state.StateID, fn state.UpdateFunc) error {
	st, g, err := c.group(s)
	if err != nil {
		return err
	}
	if st.meta.Kind == state.KindMap {
		return fmt.Errorf("heap: Update on map state %q", st.meta.Name)
	}
	e := c.lookup(s, g)
	if e != nil && e.version > c.v.required.Load() {
		// No snapshot holds e: out aliases its bytes when it fits.
		buf := e.buf()
		out, err := fn(e.value(), true, buf[:0])
		if err != nil {
			return err
		}
		if len(out) <= len(buf) && (len(out) == 0 || &out[0] == &buf[0]) {
			e.n = uint32(len(out))
			return nil
		}
		return c.put(s, nil, out)
	}
	// No entry, or a snapshot holds it: put writes a new one.
	var old []byte
	if e != nil {
		old = e.value()
	}
	out, err := fn(old, e != nil, c.scratch[:0])
	if err != nil {
		return err
	}
	c.scratch = out[:0]
	return c.put(s, nil, out)
}

func (c *core[K]) appendValue(s state.StateID, value []byte) error {
	st, g, err := c.group(s)
	if err != nil {
		return err
	}
	if st.meta.Kind == state.KindMap {
		return fmt.Errorf("heap: Append on map state %q", st.meta.Name)
	}
	required := c.v.required.Load()
	e := c.lookup(s, g)
	if e != nil && e.version > required && int(e.n)+len(value) <= int(e.c) {
		e.add(value)
		return nil
	}
	size := len(value)
	if e != nil {
		size += int(e.n)
		if e.version > required {
			size = max(size, 2*int(e.c)) // growing in place: amortized
		}
	}
	ne := newEntry(c.v.version, size)
	if e != nil {
		ne.set(e.value())
	}
	ne.add(value)
	c.install(s, g, ne, required)
	return nil
}

func (c *core[K]) del(s state.StateID, userKey []byte) error {
	st, g, err := c.group(s)
	if err != nil {
		return err
	}
	if st.meta.Kind != state.KindMap {
		return c.clear(s)
	}
	e := c.lookupMap(s, g)
	if e == nil {
		return nil
	}
	if _, ok := e.sub[string(userKey)]; !ok {
		return nil
	}
	if len(e.sub) == 1 {
		return c.clear(s)
	}
	e = c.writableMapEntry(s, g, false)
	delete(e.sub, string(userKey))
	return nil
}

func (c *core[K]) clear(s state.StateID) error {
	st, g, err := c.group(s)
	if err != nil {
		return err
	}
	required := c.v.required.Load()
	if st.meta.Kind == state.KindMap {
		if c.lookupMap(s, g) == nil {
			return nil
		}
		if c.frozen(g, required) {
			g.mm, g.created = maps.Clone(g.mm), c.v.version
		}
		delete(g.mm, c.cur)
	} else {
		if c.lookup(s, g) == nil {
			return nil
		}
		if c.frozen(g, required) {
			g.m, g.created = g.m.clone(), c.v.version
		}
		g.m.del(c.cur, c.hash(), c.ops.hash)
	}
	c.last, c.lastMap, c.lastState, c.lastOK = nil, nil, s, true
	return nil
}

func (c *core[K]) iterate(s state.StateID, fn func(userKey, value []byte) bool) error {
	st, g, err := c.group(s)
	if err != nil {
		return err
	}
	if st.meta.Kind != state.KindMap {
		return fmt.Errorf("heap: Iterate on %s state %q", st.meta.Kind, st.meta.Name)
	}
	e := c.lookupMap(s, g)
	if e == nil {
		return nil
	}
	var kb []byte
	for k, v := range e.sub {
		kb = append(kb[:0], k...)
		if !fn(kb, v) {
			break
		}
	}
	return nil
}

func (c *core[K]) entries(s state.StateID, fn func(key []byte, keyGroup int, userKey, value []byte) bool) {
	st := c.states[s]
	var kb, ukb []byte
	for j := range st.groups {
		g := c.rng.Start + j
		stop := false
		st.groups[j].m.all(func(k K, e *entry) bool {
			kb = c.ops.appendKey(kb[:0], k)
			stop = !fn(kb, g, nil, e.value())
			return !stop
		})
		if stop {
			return
		}
		for k, e := range st.groups[j].mm {
			kb = c.ops.appendKey(kb[:0], k)
			for uk, uv := range e.sub {
				ukb = append(ukb[:0], uk...)
				if !fn(kb, g, ukb, uv) {
					return
				}
			}
		}
	}
}

func (c *core[K]) numEntries(s state.StateID) int {
	n := 0
	for _, g := range c.states[s].groups {
		n += g.m.n + len(g.mm)
	}
	return n
}

// capture records the map object of every (state, key group): from now on
// they are frozen (the caller has made the snapshot's version required).
func (c *core[K]) capture() capturedFunc {
	captured := make([][]group[K], len(c.states))
	for i, st := range c.states {
		captured[i] = append([]group[K](nil), st.groups...)
	}
	ops := c.ops
	return func(i, j int, fn func(key []byte, e *entry, me *mapEntry) error) error {
		var kb []byte
		g := &captured[i][j]
		var err error
		g.m.all(func(k K, e *entry) bool {
			kb = ops.appendKey(kb[:0], k)
			err = fn(kb, e, nil)
			return err == nil
		})
		if err != nil {
			return err
		}
		for k, e := range g.mm {
			kb = ops.appendKey(kb[:0], k)
			if err := fn(kb, nil, e); err != nil {
				return err
			}
		}
		return nil
	}
}

func (c *core[K]) clearAll() {
	c.states = nil
	c.last, c.lastMap, c.lastOK = nil, nil, false
	c.curGroup = -1
}

// convert returns a core with keys of type K holding what from holds, its
// keys decoded with ops. Every key must decode and encode back to the same
// bytes. Entries are shared: their versions keep them copy-on-write.
func convert[K comparable](from *core[string], ops keyOps[K]) (*core[K], error) {
	to := newCore(ops, from.rng, from.v)
	var kb []byte
	decode := func(name, k string) (K, error) {
		b := unsafe.Slice(unsafe.StringData(k), len(k))
		key, borrowed, err := ops.view(b)
		if err != nil {
			return key, fmt.Errorf("heap: state %q: key %x: %w", name, k, err)
		}
		if borrowed {
			key = ops.clone(key)
		}
		if kb = ops.appendKey(kb[:0], key); string(kb) != k {
			return key, fmt.Errorf("heap: state %q: key %x encodes back as %x", name, k, kb)
		}
		return key, nil
	}
	for _, st := range from.states {
		nst := &kvState[K]{meta: st.meta, groups: make([]group[K], len(st.groups))}
		for j, g := range st.groups {
			ng := &nst.groups[j]
			ng.created = from.v.version
			var err error
			g.m.all(func(k string, e *entry) bool {
				var key K
				if key, err = decode(st.meta.Name, k); err == nil {
					ng.m.put(key, ops.hash(key), e, ops.hash)
				}
				return err == nil
			})
			if err != nil {
				return nil, err
			}
			if g.mm != nil {
				ng.mm = make(map[K]*mapEntry, len(g.mm))
				for k, e := range g.mm {
					key, err := decode(st.meta.Name, k)
					if err != nil {
						return nil, err
					}
					ng.mm[key] = e
				}
			}
		}
		to.states = append(to.states, nst)
	}
	return to, nil
}
