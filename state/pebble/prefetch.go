package pebble

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"

	pdb "github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/state"
)

// prefetcher is the state of Backend.Prefetch: the states whose values it
// loads, whether it pays, and its scratch.
type prefetcher struct {
	// states are the states the cache missed on a read since the backend
	// was created, in the order of their first miss: the states a
	// record's access reads (a state only ever written, or read by map
	// access, is not prefetched).
	states []state.StateID
	// on is the last decision of PrefetchWanted, mark the counters it
	// was taken at.
	on   bool
	mark CacheStats

	arena []byte
	ends  []int
	keys  [][]byte
	// order and tmp sort keys into sorted (deduplicated).
	order, tmp []sortKey
	sorted     [][]byte
	far        prefetchRead
}

// prefetchWindow is the number of cache lookups PrefetchWanted decides
// over.
const prefetchWindow = 512

// noteRead records the state of data key k, which the cache missed.
func (b *Backend) noteRead(k []byte) {
	s := state.StateID(binary.BigEndian.Uint32(k[groupLen:headerLen]))
	if !slices.Contains(b.pf.states, s) {
		b.pf.states = append(b.pf.states, s)
	}
}

// PrefetchWanted reports whether Prefetch pays for the coming records:
// the backend has a cache, and of the last few hundred lookups at least
// one in eight missed (or would have, but for a prefetch). A cache that
// holds the working set answers no, and its records pay nothing for
// prefetching.
func (b *Backend) PrefetchWanted() bool {
	if b.c == nil || len(b.pf.states) == 0 {
		return false
	}
	st, m := &b.stats, &b.pf.mark
	lookups := st.Hits + st.Misses - m.Hits - m.Misses
	if lookups < prefetchWindow {
		return b.pf.on
	}
	b.pf.on = 8*(st.Misses-m.Misses+st.Prefetched-m.Prefetched) >= lookups
	*m = *st
	return b.pf.on
}

// Prefetch reads into the cache the values that the states a record
// reads (see prefetcher.states) hold for keys (serialized, keys[i] in key
// group groups[i]) and that the cache does not hold, in one pass over the
// database in key order (from prefetchSplit keys on, the later half on a
// second goroutine, through its own iterator): the records of a network buffer, read before
// they are processed, then find their state cached. A point read of a
// random key costs several microseconds in pebble, a forward seek of one
// iterator through sorted keys less than half of that
// (BenchmarkReadFloor).
//
// It changes nothing but what the cache holds (each entry read is what
// the database has, clean): the current key stays, and a key in a group
// outside the backend's range is skipped (its record fails when it is
// processed). A cache smaller than the keys evicts some of them again
// before their records come, which then miss as they would have.
func (b *Backend) Prefetch(keys [][]byte, groups []int) error {
	if b.c == nil || len(b.pf.states) == 0 || len(keys) == 0 {
		return nil
	}
	if err := b.writeErr(); err != nil {
		return err
	}
	pf := &b.pf
	pf.arena, pf.ends = pf.arena[:0], pf.ends[:0]
	for i, k := range keys {
		if !b.rng.Contains(groups[i]) {
			continue
		}
		for _, s := range pf.states {
			start := len(pf.arena)
			pf.arena = appendPrefix(pf.arena, groups[i], uint32(s), k)
			if b.c.holds(pf.arena[start:]) {
				pf.arena = pf.arena[:start]
				continue
			}
			pf.ends = append(pf.ends, len(pf.arena))
		}
	}
	if len(pf.ends) == 0 {
		return nil
	}
	pf.keys, pf.order = pf.keys[:0], pf.order[:0]
	start := 0
	for i, end := range pf.ends {
		k := pf.arena[start:end:end]
		pf.keys = append(pf.keys, k)
		pf.order = append(pf.order, newSortKey(k, int32(i)))
		start = end
	}
	pf.tmp = sortKeys(pf.order, pf.tmp, func(a, b int32) int { return bytes.Compare(pf.keys[a], pf.keys[b]) })
	pf.sorted = pf.sorted[:0]
	for _, o := range pf.order {
		if k := pf.keys[o.slot]; len(pf.sorted) == 0 || !bytes.Equal(pf.sorted[len(pf.sorted)-1], k) {
			pf.sorted = append(pf.sorted, k)
		}
	}

	// The iterators see the database as it is now: every key in the list
	// is uncached, so the database has its truth, and the evictions below
	// write only keys the cache held.
	sorted := pf.sorted
	var far *prefetchRead
	var done chan struct{}
	if len(sorted) >= prefetchSplit && runtime.GOMAXPROCS(0) > 1 {
		// Another goroutine reads the later keys while this one reads
		// and caches the earlier ones: the reads, pebble's seeks, are
		// most of a prefetch. It touches nothing of the backend but the
		// database and its own prefetchRead; the cache stays this
		// goroutine's.
		n := len(sorted) * prefetchNear / 100
		far = &pf.far
		far.reset(sorted[n:])
		sorted = sorted[:n]
		it, err := b.db.NewIter(nil)
		if err != nil {
			return fmt.Errorf("pebble: prefetch: %w", err)
		}
		done = make(chan struct{})
		go func() {
			defer close(done)
			far.read(it)
		}()
	}
	err := b.prefetchNear(sorted)
	if far == nil {
		return err
	}
	<-done
	if err != nil {
		return err
	}
	if far.err != nil {
		return fmt.Errorf("pebble: prefetch: %w", far.err)
	}
	start = 0
	for i, k := range far.keys {
		end := far.ends[i]
		found := end >= 0
		if !found {
			end = start
		}
		if err := b.prefetched(k, far.vals[start:end], found); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// prefetchSplit is the number of keys from which Prefetch reads on two
// goroutines (a variable for tests), and prefetchNear the percentage of
// them that the calling goroutine reads (it also caches them all).
var prefetchSplit = 256

const prefetchNear = 50

// prefetchNear reads keys through a new iterator and caches them.
func (b *Backend) prefetchNear(keys [][]byte) error {
	it, err := b.db.NewIter(nil)
	if err != nil {
		return fmt.Errorf("pebble: prefetch: %w", err)
	}
	for _, k := range keys {
		var val []byte
		found := it.SeekGE(k) && bytes.Equal(it.Key(), k)
		if found {
			if val, err = it.ValueAndErr(); err != nil {
				break
			}
		}
		if err = b.prefetched(k, val, found); err != nil {
			_ = it.Close()
			return err // the backend failed: see commit
		}
	}
	if err == nil {
		err = it.Error()
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pebble: prefetch: %w", err)
	}
	return nil
}

// prefetched caches what the database holds for key k, evicting as needed.
func (b *Backend) prefetched(k, val []byte, found bool) error {
	i := b.c.insert(k, val, found, false)
	b.stats.Prefetched++
	if b.c.overLimit() {
		return b.evict(i)
	}
	return nil
}

// prefetchRead is the part of a prefetch read on another goroutine: the
// keys, and what the database holds for them.
type prefetchRead struct {
	keys [][]byte
	vals []byte // the values, one after the other
	ends []int  // where each key's value ends in vals; -1: absent
	err  error
}

func (r *prefetchRead) reset(keys [][]byte) {
	r.keys, r.vals, r.ends, r.err = keys, r.vals[:0], r.ends[:0], nil
}

// read reads r.keys through it and closes it.
func (r *prefetchRead) read(it *pdb.Iterator) {
	for _, k := range r.keys {
		if !it.SeekGE(k) || !bytes.Equal(it.Key(), k) {
			r.ends = append(r.ends, -1)
			continue
		}
		val, err := it.ValueAndErr()
		if err != nil {
			r.err = err
			break
		}
		r.vals = append(r.vals, val...)
		r.ends = append(r.ends, len(r.vals))
	}
	if r.err == nil {
		r.err = it.Error()
	}
	if err := it.Close(); r.err == nil {
		r.err = err
	}
}
