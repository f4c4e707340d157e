// Package heap implements state.KeyedBackend in memory, with
// copy-on-write asynchronous snapshots (Flink's heap keyed state backend
// with its CopyOnWriteStateMap).
//
// A Backend keeps, for each (state, key group), a Go map from serialized key
// to an entry holding the value bytes. Snapshots are versioned:
//
//   - The synchronous part of Snapshot takes the next version number v and
//     records the current map object of every (state, key group), which is
//     O(states × key groups) pointer copies, independent of the number of
//     keys. From then on the maps and entries it captured are frozen.
//   - A map object is frozen while some live snapshot's version is ≥ the
//     version at which the map became live; the first structural write
//     after a snapshot clones it (a shallow copy of the pointer table).
//   - An entry is frozen while some live snapshot's version is ≥ the
//     entry's version; a write to it creates a new entry (with a copy of
//     the bytes) at the current version. Entries written after the latest
//     snapshot are updated in place, without allocating.
//   - The asynchronous part iterates the captured maps on another
//     goroutine and writes the state.KeyedSnapshotWriter format; when it is
//     done the snapshot is released, which lowers the highest live version
//     (an atomic), and entries become writable in place again.
package heap

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

// Config configures a Backend. The zero value serves all key groups of a
// job with parallelism 1 and the default max parallelism.
type Config struct {
	// MaxParallelism is the number of key groups; 0 means
	// keygroup.DefaultMaxParallelism.
	MaxParallelism int
	// Parallelism and Index select the key-group range this backend serves
	// (keygroup.RangeFor); Parallelism 0 means 1.
	Parallelism, Index int
	// Logger; nil means no logging.
	Logger *zap.Logger
}

// withDefaults validates c and returns it with defaults applied.
func (c Config) withDefaults() (Config, error) {
	if c.MaxParallelism == 0 {
		c.MaxParallelism = keygroup.DefaultMaxParallelism
	}
	if c.Parallelism == 0 {
		c.Parallelism = 1
	}
	if err := keygroup.Validate(c.MaxParallelism, c.Parallelism); err != nil {
		return c, fmt.Errorf("heap: %w", err)
	}
	if c.Index < 0 || c.Index >= c.Parallelism {
		return c, fmt.Errorf("heap: subtask index %d out of range [0, %d)", c.Index, c.Parallelism)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c, nil
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

// Backend is the in-memory keyed state backend of one subtask.
type Backend struct {
	maxPar int
	rng    keygroup.Range
	log    *zap.Logger

	states []*kvState
	byName map[string]state.StateID

	curKey   []byte
	curGroup int // index into a kvState's groups, -1 if unset
	// last caches the entry of (lastState, current key) found by the last
	// lookup, so that the Value+Update pair hashes the key once. Reset by
	// SetCurrentKey and by every change to which entry the key maps to.
	last      *entry
	lastState state.StateID
	// version is the version of writes happening now; a snapshot takes it
	// and increments it.
	version uint64
	// required is the highest version of a live snapshot (0: none). It is
	// written under mu, read atomically on the hot path.
	required atomic.Uint64
	mu       struct {
		sync.Mutex
		live map[uint64]int // snapshot version → count
	}
	closed bool
}

type kvState struct {
	meta   state.StateMeta
	groups []group
}

type group struct {
	m       map[string]*entry
	created uint64 // version at which m became the live map object
}

type entry struct {
	version uint64
	value   []byte            // every kind but map
	sub     map[string][]byte // map states; its values are never modified in place
}

var _ state.KeyedBackend = (*Backend)(nil)

// New returns an empty backend.
func New(cfg Config) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Backend{
		maxPar:   cfg.MaxParallelism,
		rng:      keygroup.RangeFor(cfg.MaxParallelism, cfg.Parallelism, cfg.Index),
		log:      cfg.Logger,
		byName:   map[string]state.StateID{},
		curGroup: -1,
		version:  1,
	}
	b.mu.live = map[uint64]int{}
	return b, nil
}

// KeyGroupRange implements state.KeyedBackend.
func (b *Backend) KeyGroupRange() keygroup.Range { return b.rng }

// MaxParallelism implements state.KeyedBackend.
func (b *Backend) MaxParallelism() int { return b.maxPar }

// Register implements state.KeyedBackend.
func (b *Backend) Register(name string, kind state.Kind) (state.StateID, error) {
	if !kind.Valid() {
		return 0, fmt.Errorf("heap: state %q: invalid kind %d", name, kind)
	}
	if id, ok := b.byName[name]; ok {
		if k := b.states[id].meta.Kind; k != kind {
			return 0, fmt.Errorf("heap: state %q is registered as %s, requested as %s", name, k, kind)
		}
		return id, nil
	}
	id := state.StateID(len(b.states))
	b.states = append(b.states, &kvState{
		meta:   state.StateMeta{Name: name, Kind: kind},
		groups: make([]group, b.rng.Len()),
	})
	b.byName[name] = id
	return id, nil
}

// States implements state.KeyedBackend.
func (b *Backend) States() []state.StateMeta {
	out := make([]state.StateMeta, len(b.states))
	for i, s := range b.states {
		out[i] = s.meta
	}
	return out
}

// SetCurrentKey implements state.KeyedBackend.
func (b *Backend) SetCurrentKey(key []byte, keyGroup int) {
	if !b.rng.Contains(keyGroup) {
		panic(fmt.Sprintf("heap: key group %d outside this backend's range %s (record routed to the wrong subtask)", keyGroup, b.rng))
	}
	b.curKey = append(b.curKey[:0], key...)
	b.curGroup = keyGroup - b.rng.Start
	b.last = nil
}

// CurrentKey implements state.KeyedBackend.
func (b *Backend) CurrentKey() ([]byte, int) {
	if b.curGroup < 0 {
		return nil, -1
	}
	return b.curKey, b.curGroup + b.rng.Start
}

func (b *Backend) group(s state.StateID) (*kvState, *group, error) {
	if int(s) >= len(b.states) {
		return nil, nil, fmt.Errorf("heap: unknown state id %d", s)
	}
	if b.curGroup < 0 {
		return nil, nil, fmt.Errorf("heap: state %q accessed without a current key", b.states[s].meta.Name)
	}
	st := b.states[s]
	return st, &st.groups[b.curGroup], nil
}

// lookup returns the current key's entry of state s (nil if none).
func (b *Backend) lookup(s state.StateID, g *group) *entry {
	if b.last != nil && b.lastState == s {
		return b.last
	}
	e := g.m[string(b.curKey)]
	b.last, b.lastState = e, s
	return e
}

// writableMap returns g's map, cloning it first if a live snapshot holds it.
func (b *Backend) writableMap(g *group, required uint64) map[string]*entry {
	if g.m == nil {
		g.m = make(map[string]*entry)
		g.created = b.version
	} else if required >= g.created {
		g.m = maps.Clone(g.m)
		g.created = b.version
	}
	return g.m
}

// writableEntry returns the current key's entry ready for modification:
// the existing one if no live snapshot holds it, else a fresh copy at the
// current version; with create, a missing entry is created.
func (b *Backend) writableEntry(s state.StateID, st *kvState, g *group, create bool, extra int) *entry {
	required := b.required.Load()
	e := b.lookup(s, g)
	if e != nil && e.version > required {
		return e
	}
	if e == nil && !create {
		return nil
	}
	ne := &entry{version: b.version}
	if st.meta.Kind == state.KindMap {
		if e != nil {
			ne.sub = maps.Clone(e.sub)
		} else {
			ne.sub = map[string][]byte{}
		}
	} else if e != nil {
		ne.value = append(make([]byte, 0, len(e.value)+extra), e.value...)
	}
	b.writableMap(g, required)[string(b.curKey)] = ne
	b.last, b.lastState = ne, s
	return ne
}

// Get implements state.KeyedBackend.
func (b *Backend) Get(s state.StateID, userKey []byte) ([]byte, bool, error) {
	st, g, err := b.group(s)
	if err != nil {
		return nil, false, err
	}
	e := b.lookup(s, g)
	if e == nil {
		return nil, false, nil
	}
	if st.meta.Kind == state.KindMap {
		v, ok := e.sub[string(userKey)]
		return v, ok, nil
	}
	return e.value, true, nil
}

// Put implements state.KeyedBackend.
func (b *Backend) Put(s state.StateID, userKey, value []byte) error {
	st, g, err := b.group(s)
	if err != nil {
		return err
	}
	if st.meta.Kind == state.KindMap {
		e := b.writableEntry(s, st, g, true, 0)
		e.sub[string(userKey)] = bytes.Clone(value)
		return nil
	}
	// Hot path: an existing entry no snapshot holds is overwritten in place.
	if e := b.lookup(s, g); e != nil && e.version > b.required.Load() {
		e.value = append(e.value[:0], value...)
		return nil
	}
	e := b.writableEntry(s, st, g, true, 0)
	e.value = append(e.value[:0], value...)
	return nil
}

// Append implements state.KeyedBackend.
func (b *Backend) Append(s state.StateID, value []byte) error {
	st, g, err := b.group(s)
	if err != nil {
		return err
	}
	if st.meta.Kind == state.KindMap {
		return fmt.Errorf("heap: Append on map state %q", st.meta.Name)
	}
	e := b.writableEntry(s, st, g, true, len(value))
	e.value = append(e.value, value...)
	return nil
}

// Delete implements state.KeyedBackend.
func (b *Backend) Delete(s state.StateID, userKey []byte) error {
	st, g, err := b.group(s)
	if err != nil {
		return err
	}
	if st.meta.Kind != state.KindMap {
		return b.Clear(s)
	}
	e := g.m[string(b.curKey)]
	if e == nil {
		return nil
	}
	if _, ok := e.sub[string(userKey)]; !ok {
		return nil
	}
	if len(e.sub) == 1 {
		return b.Clear(s)
	}
	e = b.writableEntry(s, st, g, false, 0)
	delete(e.sub, string(userKey))
	return nil
}

// Clear implements state.KeyedBackend.
func (b *Backend) Clear(s state.StateID) error {
	_, g, err := b.group(s)
	if err != nil {
		return err
	}
	if b.lookup(s, g) == nil {
		return nil
	}
	delete(b.writableMap(g, b.required.Load()), string(b.curKey))
	b.last, b.lastState = nil, s
	return nil
}

// Iterate implements state.KeyedBackend.
func (b *Backend) Iterate(s state.StateID, fn func(userKey, value []byte) bool) error {
	st, g, err := b.group(s)
	if err != nil {
		return err
	}
	if st.meta.Kind != state.KindMap {
		return fmt.Errorf("heap: Iterate on %s state %q", st.meta.Kind, st.meta.Name)
	}
	e := g.m[string(b.curKey)]
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

// Entries implements state.KeyedBackend.
func (b *Backend) Entries(s state.StateID, fn func(key []byte, keyGroup int, userKey, value []byte) bool) error {
	if int(s) >= len(b.states) {
		return fmt.Errorf("heap: unknown state id %d", s)
	}
	st := b.states[s]
	var kb, ukb []byte
	for j := range st.groups {
		g := b.rng.Start + j
		for k, e := range st.groups[j].m {
			kb = append(kb[:0], k...)
			if st.meta.Kind != state.KindMap {
				if !fn(kb, g, nil, e.value) {
					return nil
				}
				continue
			}
			for uk, uv := range e.sub {
				ukb = append(ukb[:0], uk...)
				if !fn(kb, g, ukb, uv) {
					return nil
				}
			}
		}
	}
	return nil
}

// NumEntries returns the number of keys with state s (all key groups).
func (b *Backend) NumEntries(s state.StateID) int {
	if int(s) >= len(b.states) {
		return 0
	}
	n := 0
	for _, g := range b.states[s].groups {
		n += len(g.m)
	}
	return n
}

// Snapshot implements state.KeyedBackend. The synchronous part records the
// map object of every (state, key group) and bumps the version; it does not
// copy keys or values. The returned function must be called exactly once.
func (b *Backend) Snapshot(id barrier.CheckpointID, w state.StateWriterFactory) (state.KeyedSnapshotFunc, error) {
	if b.closed {
		return nil, fmt.Errorf("heap: snapshot %d of a closed backend", id)
	}
	v := b.version
	b.version++
	metas := b.States()
	captured := make([][]map[string]*entry, len(b.states))
	for i, st := range b.states {
		captured[i] = make([]map[string]*entry, len(st.groups))
		for j := range st.groups {
			captured[i][j] = st.groups[j].m
		}
	}
	b.mu.Lock()
	b.mu.live[v]++
	b.required.Store(v) // v is the newest version
	b.mu.Unlock()

	var once sync.Once
	return func(ctx context.Context) (*state.KeyedStateHandle, error) {
		ran := false
		once.Do(func() { ran = true })
		if !ran {
			return nil, fmt.Errorf("heap: snapshot %d: asynchronous part called twice", id)
		}
		defer b.release(v)
		return writeSnapshot(ctx, id, w, b.maxPar, b.rng, metas, captured)
	}, nil
}

func writeSnapshot(ctx context.Context, id barrier.CheckpointID, w state.StateWriterFactory, maxPar int,
	rng keygroup.Range, metas []state.StateMeta, captured [][]map[string]*entry) (*state.KeyedStateHandle, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sw, err := w.CreateStateWriter(id, "keyed")
	if err != nil {
		return nil, err
	}
	kw := state.NewKeyedSnapshotWriter(sw, maxPar, rng, metas)
	var kb []byte
	for j := range rng.Len() {
		if err := ctx.Err(); err != nil {
			_ = kw.Abort()
			return nil, err
		}
		if err := kw.BeginKeyGroup(rng.Start + j); err != nil {
			_ = kw.Abort()
			return nil, err
		}
		for i, meta := range metas {
			for k, e := range captured[i][j] {
				kb = append(kb[:0], k...)
				if meta.Kind == state.KindMap {
					for uk, uv := range e.sub {
						err = kw.Record(i, kb, []byte(uk), uv)
					}
				} else {
					err = kw.Record(i, kb, nil, e.value)
				}
				if err != nil {
					_ = kw.Abort()
					return nil, err
				}
			}
		}
	}
	return kw.Close()
}

// release ends snapshot v: entries and maps only it held become writable in
// place again.
func (b *Backend) release(v uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.live[v]--; b.mu.live[v] <= 0 {
		delete(b.mu.live, v)
	}
	var hi uint64
	for lv := range b.mu.live {
		hi = max(hi, lv)
	}
	b.required.Store(hi)
}

// LiveSnapshots returns the number of snapshots whose asynchronous part has
// not finished.
func (b *Backend) LiveSnapshots() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.mu.live {
		n += c
	}
	return n
}

// Restore implements state.KeyedBackend: it reads the key groups of this
// backend's range from the keyed snapshots of all previous subtasks.
func (b *Backend) Restore(handles []state.KeyedStateHandle, r state.StateReader) error {
	defer func() { b.curGroup = -1 }()
	return state.ReadKeyedSnapshots(handles, b.maxPar, b.rng, r,
		func(metas []state.StateMeta) error {
			for _, m := range metas {
				if _, err := b.Register(m.Name, m.Kind); err != nil {
					return err
				}
			}
			return nil
		},
		func(rec state.KeyedRecord) error {
			b.SetCurrentKey(rec.Key, rec.KeyGroup)
			id := b.byName[rec.State.Name]
			if rec.State.Kind == state.KindMap {
				return b.Put(id, rec.UserKey, rec.Value)
			}
			return b.Put(id, nil, rec.Value)
		})
}

// Close implements state.KeyedBackend. Snapshots in flight stay valid.
func (b *Backend) Close() error {
	b.closed = true
	b.last = nil
	b.states = nil
	b.byName = map[string]state.StateID{}
	return nil
}
