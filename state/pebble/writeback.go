package pebble

import (
	"fmt"
	"unsafe"

	pdb "github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/state"
)

// CacheStats counts the work of a Backend's write-back cache since New.
type CacheStats struct {
	// Hits and Misses count the cache's lookups that read (Get, Update):
	// a miss reads the database once.
	Hits, Misses int64
	// Prefetched counts the entries Prefetch read from the database into
	// the cache: misses it saved the records' accesses, as long as the
	// entries stayed cached until their records came.
	Prefetched int64
	// Evicted counts the entries evicted, Written the entries written to
	// the database (by evictions, write-backs and snapshots).
	Evicted, Written int64
	// Entries and Bytes are what the cache holds now (Bytes as it accounts
	// them, at most Config.CacheBytes after every call), DirtyBytes the
	// part of Bytes the database does not have yet.
	Entries           int
	Bytes, DirtyBytes int64
	// DirtyLimit is Config.DirtyBytes: beyond it, dirty entries are
	// written back.
	DirtyLimit int64
}

// CacheStats returns the cache's counters (zero without a cache).
func (b *Backend) CacheStats() CacheStats {
	st := b.stats
	if b.c != nil {
		st.Entries, st.Bytes, st.DirtyBytes = b.c.idx.n, b.c.bytes, b.c.dirtyBytes
		st.DirtyLimit = b.c.dirtyLimit
	}
	return st
}

// cached returns the cache slot of data key k of state m, reading the
// database on a miss (the slot then holds what it read, clean, or that
// the key is absent).
func (b *Backend) cached(k []byte, m state.StateMeta) (int32, error) {
	if b.failed != nil {
		return -1, b.failed
	}
	if i := b.c.lookup(k); i >= 0 {
		b.stats.Hits++
		return i, nil
	}
	b.stats.Misses++
	b.noteRead(k)
	v, ok, err := b.get(k, m)
	if err != nil {
		return -1, err
	}
	i := b.c.insert(k, v, ok, false)
	if b.c.overLimit() {
		if err := b.evict(i); err != nil {
			return -1, err
		}
	}
	return i, nil
}

// written keeps the cache within its bounds after slot i was written.
func (b *Backend) written(i int32) error {
	if b.c.overLimit() {
		if err := b.evict(i); err != nil {
			return err
		}
	}
	if b.c.overDirty() {
		return b.flushCache()
	}
	return nil
}

// evict evicts cold entries, never slot keep, writing the dirty ones in
// one batch.
func (b *Backend) evict(keep int32) error {
	n := b.c.idx.n
	err := b.c.evict(keep, b.batchWrite)
	b.stats.Evicted += int64(n - b.c.idx.n)
	return b.commit(err)
}

// flushCache writes the cache's dirty entries to the database in one
// sorted batch; they stay cached, clean.
func (b *Backend) flushCache() error {
	if b.c == nil {
		return nil
	}
	if b.failed != nil {
		return b.failed
	}
	if err := b.writeErr(); err != nil {
		return err
	}
	return b.commit(b.c.writeBack(b.batchWrite))
}

// batchWrite adds one cache entry to the write batch.
func (b *Backend) batchWrite(key string, val []byte, present bool) error {
	k := unsafe.Slice(unsafe.StringData(key), len(key)) // the batch copies it
	b.stats.Written++
	if present {
		return b.wb.Set(k, val, nil)
	}
	return b.wb.Delete(k, nil)
}

// commit commits the write batch; err, or the commit's failure, fails the
// backend for good: the cache no longer has what the batch held.
func (b *Backend) commit(err error) error {
	if err == nil && !b.wb.Empty() {
		err = b.wb.Commit(pdb.NoSync)
	}
	b.wb.Reset()
	if err != nil {
		b.failed = fmt.Errorf("pebble: write-back cache: %w", err)
		return b.failed
	}
	return nil
}

// Update implements state.Updater. With the cache, the value is folded in
// the cache entry, in place when it fits: a hit touches no pebble code.
// Without, it is a Get and a Put.
func (b *Backend) Update(s state.StateID, fn state.UpdateFunc) error {
	k, m, err := b.key(s, nil)
	if err != nil {
		return err
	}
	if m.Kind == state.KindMap {
		return fmt.Errorf("pebble: Update on map state %q", m.Name)
	}
	if err := b.writeErr(); err != nil {
		return err
	}
	if b.c == nil {
		old, ok, err := b.get(k, m)
		if err != nil {
			return err
		}
		out, err := fn(old, ok, b.upd[:0])
		if err != nil {
			return err
		}
		b.upd = out[:0]
		if err := b.db.Set(k, out, pdb.NoSync); err != nil {
			return fmt.Errorf("pebble: state %q: update: %w", m.Name, err)
		}
		return nil
	}
	i, err := b.cached(k, m)
	if err != nil {
		return err
	}
	e := b.c.at(i)
	var old []byte
	if e.present {
		old = e.val
	}
	out, err := fn(old, e.present, e.val[:0])
	if err != nil {
		return err
	}
	e.val, e.present = out, true
	b.c.resize(i)
	b.c.markDirty(i)
	return b.written(i)
}
