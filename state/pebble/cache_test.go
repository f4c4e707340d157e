package pebble_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
	"github.com/weirstream/weir/state/internal/backendtest"
	"github.com/weirstream/weir/state/pebble"
)

// A state 100 times the cache keeps the Go heap within what the
// configuration allows: the cache, pebble's memtables and block cache
// (on the Go heap under the race detector) and a constant. The heap
// backend, holding the same state, goes far beyond: the bound is one a
// cache that did not evict would break.
func TestCacheBoundsMemory(t *testing.T) {
	const (
		cacheBytes = 64 << 10
		pebbleMem  = 2<<20 + 64<<10 // two memtables of 1 MiB, the block cache
		constant   = 1 << 20
		valueLen   = 1 << 10
		keys       = 100 * cacheBytes / valueLen
	)
	val := make([]byte, valueLen)
	run := func(t *testing.T, kb state.KeyedBackend, check func()) uint64 {
		s, err := kb.Register("v", state.KindValue)
		require.NoError(t, err)
		before := heapInUse()
		for i := range keys {
			k := backendtest.Key(i)
			require.NoError(t, kb.SetCurrentKey(k, backendtest.Group(k, kb.MaxParallelism())))
			copy(val, fmt.Sprint(i))
			require.NoError(t, kb.Put(s, nil, val))
			check()
		}
		for i := range keys { // every read misses, and evicts
			k := backendtest.Key(i)
			require.NoError(t, kb.SetCurrentKey(k, backendtest.Group(k, kb.MaxParallelism())))
			v, ok, err := kb.Get(s, nil)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, fmt.Sprint(i), string(v[:len(fmt.Sprint(i))]))
			check()
		}
		grown := heapInUse() - min(before, heapInUse())
		require.NoError(t, kb.Close())
		return grown
	}
	b, err := pebble.New(pebble.Config{Dir: t.TempDir(), CacheBytes: cacheBytes, MemTableSize: 1 << 20, MemTables: 2, BlockCacheSize: 64 << 10})
	require.NoError(t, err)
	grown := run(t, b, func() {
		if st := b.CacheStats(); st.Bytes > cacheBytes {
			t.Fatalf("cache holds %d bytes, over its %d", st.Bytes, cacheBytes)
		}
	})
	st := b.CacheStats()
	t.Logf("pebble: state %d KiB, cache %d KiB, Go heap grew %d KiB; %+v", keys*valueLen>>10, cacheBytes>>10, grown>>10, st)
	require.LessOrEqual(t, grown, uint64(cacheBytes+pebbleMem+constant))
	require.Greater(t, st.Evicted, int64(keys), "evicted on writes and on reads")

	h, err := heap.New(heap.Config{})
	require.NoError(t, err)
	hgrown := run(t, h, func() {})
	t.Logf("heap: Go heap grew %d KiB", hgrown>>10)
	require.Greater(t, hgrown, uint64(cacheBytes+pebbleMem+constant), "the bound discriminates")
}

// crashCase is a backend configuration of the crash tests.
type crashCase struct {
	name        string
	cacheBytes  int64
	incremental bool
}

var crashCases = []crashCase{
	{"full/cache=tiny", tinyCache, false},
	{"full/cache=default", 0, false},
	{"incremental/cache=tiny", tinyCache, true},
	{"incremental/cache=default", 0, true},
}

// A crash after evictions wrote newer values to the database loses
// nothing the last completed checkpoint had, and shows nothing it did not:
// eviction writes go to the working database, never to a checkpoint's
// files. The checkpoint itself is exact with dirty entries in the cache
// (with the default cache, every entry is dirty when it is taken).
func TestCacheCrashAfterEviction(t *testing.T) {
	const n = 500
	for _, c := range crashCases {
		t.Run(c.name, func(t *testing.T) {
			st := state.NewMemoryStorage()
			w := state.PrefixedWriters(st, "op")
			cfg := pebble.Config{CacheBytes: c.cacheBytes, Incremental: c.incremental}
			b, err := pebble.New(small(t, cfg))
			require.NoError(t, err)
			states := register(t, b)
			for i := range n {
				states.write(t, b, i, 1)
			}
			want := backendtest.Dump(t, b)
			require.Len(t, want, 3*n)
			h := snapshotComplete(t, b, 1, w)

			// After the checkpoint: every key rewritten, a third deleted,
			// the cache evicting (or, by default, holding them dirty).
			for i := range n {
				states.write(t, b, i, 2)
				if i%3 == 0 {
					states.clear(t, b, i)
				}
			}
			if c.cacheBytes == tinyCache {
				require.Greater(t, b.CacheStats().Written, int64(n), "evictions wrote to the database")
			}
			require.NoError(t, b.Close()) // the crash: no checkpoint of round 2

			r, err := pebble.New(small(t, cfg))
			require.NoError(t, err)
			require.NoError(t, r.Restore([]state.KeyedStateHandle{h}, st))
			require.Equal(t, want, backendtest.Dump(t, r), "the checkpoint exactly")
			// The restored backend goes on: round 3 over it, checkpointed
			// with dirty entries, restores exactly.
			states = register(t, r)
			for i := range n {
				if i%2 == 0 {
					states.write(t, r, i, 3)
				}
			}
			want = backendtest.Dump(t, r)
			h = snapshotComplete(t, r, 2, w)
			require.NoError(t, r.Close())
			r2, err := pebble.New(small(t, cfg))
			require.NoError(t, err)
			defer r2.Close()
			require.NoError(t, r2.Restore([]state.KeyedStateHandle{h}, st))
			require.Equal(t, want, backendtest.Dump(t, r2))
		})
	}
}

func snapshotComplete(t *testing.T, b *pebble.Backend, id barrier.CheckpointID, w state.StateWriterFactory) state.KeyedStateHandle {
	t.Helper()
	f, err := b.Snapshot(id, w)
	require.NoError(t, err)
	h, err := f(context.Background())
	require.NoError(t, err)
	b.NotifyCheckpointComplete(id)
	return *h
}

// crashStates are a value, a list and a reducing state.
type crashStates struct {
	val  *state.ValueState[int64]
	list *state.ListState[int64]
	red  *state.ReducingState[int64]
}

func register(t *testing.T, b state.KeyedBackend) crashStates {
	var s crashStates
	var err error
	s.val, err = state.GetValueState(b, state.ValueDescriptor[int64]{Name: "v", Codec: backendtest.Int64{}})
	require.NoError(t, err)
	s.list, err = state.GetListState(b, state.ListDescriptor[int64]{Name: "l", Codec: backendtest.Int64{}})
	require.NoError(t, err)
	s.red, err = state.GetReducingState(b, state.ReducingDescriptor[int64]{Name: "r", Codec: backendtest.Int64{}, Reduce: func(a, b int64) int64 { return a + b }})
	require.NoError(t, err)
	return s
}

func (s crashStates) write(t *testing.T, b state.KeyedBackend, i, round int) {
	k := backendtest.Key(i)
	require.NoError(t, b.SetCurrentKey(k, backendtest.Group(k, b.MaxParallelism())))
	require.NoError(t, s.val.Update(int64(i*10+round)))
	require.NoError(t, s.list.Add(int64(round)))
	require.NoError(t, s.red.Add(int64(i)))
}

func (s crashStates) clear(t *testing.T, b state.KeyedBackend, i int) {
	k := backendtest.Key(i)
	require.NoError(t, b.SetCurrentKey(k, backendtest.Group(k, b.MaxParallelism())))
	require.NoError(t, s.val.Clear())
	require.NoError(t, s.list.Clear())
	require.NoError(t, s.red.Clear())
}
