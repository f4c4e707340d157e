// Package heap implements state.KeyedBackend in memory, with
// copy-on-write asynchronous snapshots (Flink's heap keyed state backend
// with its CopyOnWriteStateMap).
//
// A Backend keeps, for each (state, key group), a table from key to an
// entry holding the value bytes (an open-addressing hash table; map states
// keep a Go map per key). Keys are the serialized keys until UseKeys
// switches the backend to keys of a comparable Go type, looked up by value
// and placed by a hash that costs next to nothing (an integer key's own
// bits; the keyed operators do this for built-in key codecs, and the
// window operator through state.ValueKeyBackend); either way snapshots
// hold serialized keys, in the same format. Update (state.Updater) folds a
// new value into an entry in place, with one lookup. Snapshots are
// versioned:
//
//   - The synchronous part of Snapshot takes the next version number v and
//     records the current table of every (state, key group), which is
//     O(states × key groups) copies, independent of the number of keys.
//     From then on the tables and entries it captured are frozen.
//   - A table is frozen while some live snapshot's version is ≥ the
//     version at which the table became live; the first structural write
//     after a snapshot clones it (a copy of its slot array).
//   - An entry is frozen while some live snapshot's version is ≥ the
//     entry's version; a write to it creates a new entry (with a copy of
//     the bytes) at the current version. Entries written after the latest
//     snapshot are updated in place, without allocating.
//   - The asynchronous part iterates the captured tables on another
//     goroutine and writes the state.KeyedSnapshotWriter format; when it is
//     done the snapshot is released, which lowers the highest live version
//     (an atomic), and entries become writable in place again.
package heap

import (
	"context"
	"fmt"
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
	// schemas are the states' schemas, for the typed states' checks.
	schemas state.Schemas
	log     *zap.Logger

	metas  []state.StateMeta
	byName map[string]state.StateID
	ttl    []func() int64 // per state: the clock of its TTL, nil without
	s      store          // *core[string] until UseKeys
	v      *versions
	closed bool
}

// versions orders writes and snapshots (see the package doc).
type versions struct {
	// version is the version of writes happening now; a snapshot takes it
	// and increments it. Task goroutine only.
	version uint64
	// required is the highest version of a live snapshot (0: none). It is
	// written under mu, read atomically on the hot path.
	required atomic.Uint64
	mu       struct {
		sync.Mutex
		live map[uint64]int // snapshot version → count
	}
}

var _ state.KeyedBackend = (*Backend)(nil)

// New returns an empty backend.
func New(cfg Config) (*Backend, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	v := &versions{version: 1}
	v.mu.live = map[uint64]int{}
	rng := keygroup.RangeFor(cfg.MaxParallelism, cfg.Parallelism, cfg.Index)
	return &Backend{
		maxPar: cfg.MaxParallelism,
		rng:    rng,
		log:    cfg.Logger,
		byName: map[string]state.StateID{},
		s:      newCore[string](stringKeys{}, rng, v),
		v:      v,
	}, nil
}

// KeyGroupRange implements state.KeyedBackend.
func (b *Backend) KeyGroupRange() keygroup.Range { return b.rng }

// MaxParallelism implements state.KeyedBackend.
func (b *Backend) MaxParallelism() int { return b.maxPar }

// StateSchemas implements state.SchemaHolder.
func (b *Backend) StateSchemas() *state.Schemas { return &b.schemas }

// Register implements state.KeyedBackend.
func (b *Backend) Register(name string, kind state.Kind) (state.StateID, error) {
	if !kind.Valid() {
		return 0, fmt.Errorf("heap: state %q: invalid kind %d", name, kind)
	}
	if id, ok := b.byName[name]; ok {
		if k := b.metas[id].Kind; k != kind {
			return 0, fmt.Errorf("heap: state %q is registered as %s, requested as %s", name, k, kind)
		}
		return id, nil
	}
	id := state.StateID(len(b.metas))
	meta := state.StateMeta{Name: name, Kind: kind}
	b.metas = append(b.metas, meta)
	b.s.addState(meta)
	b.byName[name] = id
	return id, nil
}

// States implements state.KeyedBackend.
func (b *Backend) States() []state.StateMeta {
	return append([]state.StateMeta(nil), b.metas...)
}

// SetCurrentKey implements state.KeyedBackend.
func (b *Backend) SetCurrentKey(key []byte, keyGroup int) error {
	if !b.rng.Contains(keyGroup) {
		return &state.KeyGroupError{Group: keyGroup, Range: b.rng}
	}
	b.s.setKeyBytes(key, keyGroup-b.rng.Start)
	return nil
}

// CurrentKey implements state.KeyedBackend.
func (b *Backend) CurrentKey() ([]byte, int) {
	k, g := b.s.currentKey()
	if g < 0 {
		return nil, -1
	}
	return k, g + b.rng.Start
}

func (b *Backend) check(s state.StateID) error {
	if int(s) >= len(b.metas) {
		return fmt.Errorf("heap: unknown state id %d", s)
	}
	return nil
}

// Get implements state.KeyedBackend.
func (b *Backend) Get(s state.StateID, userKey []byte) ([]byte, bool, error) {
	if err := b.check(s); err != nil {
		return nil, false, err
	}
	return b.s.get(s, userKey)
}

// Put implements state.KeyedBackend.
func (b *Backend) Put(s state.StateID, userKey, value []byte) error {
	if err := b.check(s); err != nil {
		return err
	}
	return b.s.put(s, userKey, value)
}

// Update implements state.Updater.
func (b *Backend) Update(s state.StateID, fn state.UpdateFunc) error {
	if err := b.check(s); err != nil {
		return err
	}
	return b.s.update(s, fn)
}

// Append implements state.KeyedBackend.
func (b *Backend) Append(s state.StateID, value []byte) error {
	if err := b.check(s); err != nil {
		return err
	}
	return b.s.appendValue(s, value)
}

// Delete implements state.KeyedBackend.
func (b *Backend) Delete(s state.StateID, userKey []byte) error {
	if err := b.check(s); err != nil {
		return err
	}
	return b.s.del(s, userKey)
}

// Clear implements state.KeyedBackend.
func (b *Backend) Clear(s state.StateID) error {
	if err := b.check(s); err != nil {
		return err
	}
	return b.s.clear(s)
}

// Iterate implements state.KeyedBackend.
func (b *Backend) Iterate(s state.StateID, fn func(userKey, value []byte) bool) error {
	if err := b.check(s); err != nil {
		return err
	}
	return b.s.iterate(s, fn)
}

// Entries implements state.KeyedBackend.
func (b *Backend) Entries(s state.StateID, fn func(key []byte, keyGroup int, userKey, value []byte) bool) error {
	if err := b.check(s); err != nil {
		return err
	}
	b.s.entries(s, fn)
	return nil
}

// EnableTTL implements state.TTLBackend: snapshots leave the expired
// values of s out.
func (b *Backend) EnableTTL(s state.StateID, nowMillis func() int64) {
	if int(s) >= len(b.metas) {
		return
	}
	for len(b.ttl) <= int(s) {
		b.ttl = append(b.ttl, nil)
	}
	b.ttl[s] = nowMillis
}

// NumEntries returns the number of keys with state s (all key groups).
func (b *Backend) NumEntries(s state.StateID) int {
	if int(s) >= len(b.metas) {
		return 0
	}
	return b.s.numEntries(s)
}

// Snapshot implements state.KeyedBackend. The synchronous part records the
// map object of every (state, key group) and bumps the version; it does not
// copy keys or values. The returned function must be called exactly once.
func (b *Backend) Snapshot(id barrier.CheckpointID, w state.StateWriterFactory) (state.KeyedSnapshotFunc, error) {
	if b.closed {
		return nil, fmt.Errorf("heap: snapshot %d of a closed backend", id)
	}
	v := b.v.version
	b.v.version++
	metas := b.States()
	ttl := append([]func() int64(nil), b.ttl...)
	captured := b.s.capture()
	b.v.mu.Lock()
	b.v.mu.live[v]++
	b.v.required.Store(v) // v is the newest version
	b.v.mu.Unlock()

	var once sync.Once
	return func(ctx context.Context) (*state.KeyedStateHandle, error) {
		ran := false
		once.Do(func() { ran = true })
		if !ran {
			return nil, fmt.Errorf("heap: snapshot %d: asynchronous part called twice", id)
		}
		defer b.v.release(v)
		return writeSnapshot(ctx, id, w, b.maxPar, b.rng, metas, ttl, captured)
	}, nil
}

func writeSnapshot(ctx context.Context, id barrier.CheckpointID, w state.StateWriterFactory, maxPar int,
	rng keygroup.Range, metas []state.StateMeta, ttl []func() int64, captured capturedFunc) (*state.KeyedStateHandle, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sw, err := w.CreateStateWriter(id, "keyed")
	if err != nil {
		return nil, err
	}
	kw := state.NewKeyedSnapshotWriter(sw, maxPar, rng, metas)
	for j := range rng.Len() {
		if err := ctx.Err(); err != nil {
			_ = kw.Abort()
			return nil, err
		}
		if err := kw.BeginKeyGroup(rng.Start + j); err != nil {
			_ = kw.Abort()
			return nil, err
		}
		for i := range metas {
			// Expired values stay out (state TTL).
			var now int64
			live := i < len(ttl) && ttl[i] != nil
			if live {
				now = ttl[i]()
			}
			err := captured(i, j, func(key []byte, e *entry, me *mapEntry) error {
				if me == nil {
					v := e.value()
					if live {
						var keep bool
						if v, keep = state.DropExpired(metas[i].Kind, now, v); !keep {
							return nil
						}
					}
					return kw.Record(i, key, nil, v)
				}
				for uk, uv := range me.sub {
					if live {
						if _, keep := state.DropExpired(state.KindMap, now, uv); !keep {
							continue
						}
					}
					if err := kw.Record(i, key, []byte(uk), uv); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				_ = kw.Abort()
				return nil, err
			}
		}
	}
	return kw.Close()
}

// release ends snapshot v: entries and maps only it held become writable in
// place again.
func (v *versions) release(ver uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.mu.live[ver]--; v.mu.live[ver] <= 0 {
		delete(v.mu.live, ver)
	}
	var hi uint64
	for lv := range v.mu.live {
		hi = max(hi, lv)
	}
	v.required.Store(hi)
}

// LiveSnapshots returns the number of snapshots whose asynchronous part has
// not finished.
func (b *Backend) LiveSnapshots() int {
	b.v.mu.Lock()
	defer b.v.mu.Unlock()
	n := 0
	for _, c := range b.v.mu.live {
		n += c
	}
	return n
}

// Restore implements state.KeyedBackend: it reads the key groups of this
// backend's range from the keyed snapshots of all previous subtasks.
func (b *Backend) Restore(handles []state.KeyedStateHandle, r state.StateReader) error {
	defer b.s.unsetKey()
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
	b.s.clearAll()
	b.metas = nil
	b.ttl = nil
	b.byName = map[string]state.StateID{}
	return nil
}
