package pebble_test

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/cputime"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
	"github.com/weirstream/weir/state/internal/backendtest"
	"github.com/weirstream/weir/state/pebble"
)

// benchKeys is the number of keys of the state benchmarks: 1 M by
// default, not the 10 M of Flink's usual figure, so that `make bench`
// stays within minutes (loading 10 M keys into pebble takes about ten
// times longer). -state.keys sets it: `make bench-state-10m` runs
// BenchmarkStateBackend with 10 M keys (the cache=1% case then caches
// 100,000 keys).
var benchKeys = 1 << 20

// benchBlockCache is the block cache of BenchmarkStateBackend's pebble
// backends (-state.blockcache, in MiB; 0: the default): where the state's
// tables do not fit in it, a miss of the write-back cache reads a block
// from the file system.
var benchBlockCache int64

func init() {
	flag.IntVar(&benchKeys, "state.keys", benchKeys, "keys of the state benchmarks")
	flag.Int64Var(&benchBlockCache, "state.blockcache", 0, "block cache of BenchmarkStateBackend's pebble backends, MiB (0: the default)")
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// load writes value i (8 bytes) for keys [0, n) of state s.
func load(b testing.TB, kb state.KeyedBackend, s state.StateID, keys [][]byte, groups []int) {
	var v [8]byte
	for i, k := range keys {
		kb.SetCurrentKey(k, groups[i])
		binary.LittleEndian.PutUint64(v[:], uint64(i))
		require.NoError(b, kb.Put(s, nil, v[:]))
	}
}

func benchKeySet(n int) ([][]byte, []int) {
	keys := make([][]byte, n)
	groups := make([]int, n)
	for i := range keys {
		keys[i] = backendtest.Key(i)
		groups[i] = backendtest.Group(keys[i], 128)
	}
	return keys, groups
}

// cachedKeyBytes is what one key of the state benchmarks takes in the
// pebble backend's cache: the accounted overhead, the data key (6 bytes of
// group and state, a length and the 8-byte key) and the 8-byte value.
const cachedKeyBytes = 128 + 15 + 8

// BenchmarkStateBackend measures keyed updates (set the key, read the
// value, write it back incremented: a keyed sum) on random keys among
// benchKeys, per backend: the heap, pebble with its default cache of
// 64 MiB (about 40 % of the keys fit), with a cache of 1 % of the keys,
// and without a cache. heap-B is the Go heap in use with the keys loaded
// (pebble's block cache and memtables are allocated off the Go heap by
// pebble's manual allocator, so its figure excludes them; it includes the
// cache); hit-% is the cache's hit rate over the measured updates.
func BenchmarkStateBackend(b *testing.B) {
	keys, groups := benchKeySet(benchKeys)
	for _, bk := range []struct {
		name string
		new  func(b *testing.B, dir string) state.KeyedBackend
	}{
		{"heap", func(b *testing.B, dir string) state.KeyedBackend {
			kb, err := heap.New(heap.Config{})
			require.NoError(b, err)
			return kb
		}},
		{"pebble", func(b *testing.B, dir string) state.KeyedBackend {
			kb, err := pebble.New(pebble.Config{Dir: dir, BlockCacheSize: benchBlockCache << 20})
			require.NoError(b, err)
			return kb
		}},
		{"pebble/cache=1%", func(b *testing.B, dir string) state.KeyedBackend {
			kb, err := pebble.New(pebble.Config{Dir: dir, BlockCacheSize: benchBlockCache << 20, CacheBytes: int64(benchKeys) * cachedKeyBytes / 100})
			require.NoError(b, err)
			return kb
		}},
		{"pebble/cache=off", func(b *testing.B, dir string) state.KeyedBackend {
			kb, err := pebble.New(pebble.Config{Dir: dir, BlockCacheSize: benchBlockCache << 20, CacheBytes: -1})
			require.NoError(b, err)
			return kb
		}},
	} {
		b.Run("backend="+bk.name, func(b *testing.B) {
			before := heapInUse()
			dir := b.TempDir()
			kb := bk.new(b, dir)
			defer kb.Close()
			s, err := kb.Register("sum", state.KindValue)
			require.NoError(b, err)
			load(b, kb, s, keys, groups)
			if pb, ok := kb.(*pebble.Backend); ok {
				// Steady state: no compaction debt from the bulk load.
				require.NoError(b, pb.Compact(context.Background()))
			}
			inUse := heapInUse() - before
			tables := dirBytes(b, dir)
			pb, _ := kb.(*pebble.Backend)
			var st0 pebble.CacheStats
			if pb != nil {
				st0 = pb.CacheStats()
			}
			r := rand.New(rand.NewPCG(1, 2))
			var v [8]byte
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cputime.Process()
			for range b.N {
				i := r.IntN(len(keys))
				kb.SetCurrentKey(keys[i], groups[i])
				old, _, err := kb.Get(s, nil)
				if err != nil {
					b.Fatal(err)
				}
				binary.LittleEndian.PutUint64(v[:], binary.LittleEndian.Uint64(old)+1)
				if err := kb.Put(s, nil, v[:]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
			b.ReportMetric(float64(inUse), "heap-B")
			b.ReportMetric(float64(benchKeys), "keys")
			if pb != nil {
				b.ReportMetric(float64(tables)/(1<<20), "db-MiB")
			}
			if pb != nil {
				st := pb.CacheStats()
				if n := st.Hits + st.Misses - st0.Hits - st0.Misses; n > 0 {
					b.ReportMetric(100*float64(st.Hits-st0.Hits)/float64(n), "hit-%")
				}
			}
		})
	}
}

// dirBytes is the size of the files under dir.
func dirBytes(b testing.TB, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	require.NoError(b, err)
	return n
}

// BenchmarkIncrementalCheckpoint: benchKeys keys with 100-byte values,
// compacted after loading; each iteration changes 1 % of the keys and
// takes a checkpoint into file storage on local disk, full or incremental
// (each completed before the next). up-B/op is what the checkpoint wrote
// to storage, up-max-B the most any one wrote (an incremental checkpoint
// after a compaction uploads the rewritten files again); ns/op includes
// the change.
func BenchmarkIncrementalCheckpoint(b *testing.B) {
	keys, groups := benchKeySet(benchKeys)
	for _, incremental := range []bool{false, true} {
		name := "mode=full"
		if incremental {
			name = "mode=incremental"
		}
		b.Run(name, func(b *testing.B) {
			st, err := state.NewFileStorage(state.FileStorageConfig{Dir: b.TempDir()})
			require.NoError(b, err)
			kb, err := pebble.New(pebble.Config{Dir: b.TempDir(), Incremental: true})
			require.NoError(b, err)
			defer kb.Close()
			s, err := kb.Register("v", state.KindValue)
			require.NoError(b, err)
			val := make([]byte, 100)
			put := func(i, round int) {
				kb.SetCurrentKey(keys[i], groups[i])
				copy(val, fmt.Sprintf("key %d round %d", i, round))
				require.NoError(b, kb.Put(s, nil, val))
			}
			for i := range keys {
				put(i, 0)
			}
			require.NoError(b, kb.Compact(context.Background()))
			w := state.StateWriterFactory(state.PrefixedWriters(st, "op"))
			if !incremental {
				w = state.FullSnapshotsOnly(w)
			}
			checkpoint := func(id barrier.CheckpointID) int64 {
				f, err := kb.Snapshot(id, w)
				require.NoError(b, err)
				h, err := f(context.Background())
				require.NoError(b, err)
				kb.NotifyCheckpointComplete(id)
				return uploaded(h, id)
			}
			first := checkpoint(1)
			r := rand.New(rand.NewPCG(3, 4))
			var total, most int64
			var dur time.Duration
			b.ResetTimer()
			for it := range b.N {
				for range len(keys) / 100 {
					put(r.IntN(len(keys)), it+1)
				}
				start := time.Now()
				n := checkpoint(barrier.CheckpointID(it + 2))
				dur += time.Since(start)
				total += n
				most = max(most, n)
			}
			b.ReportMetric(float64(total)/float64(b.N), "up-B/op")
			b.ReportMetric(float64(most), "up-max-B")
			b.ReportMetric(float64(first), "first-B")
			b.ReportMetric(float64(dur.Milliseconds())/float64(b.N), "ckpt-ms/op")
		})
	}
}

// uploaded is the bytes checkpoint id wrote to storage.
func uploaded(h *state.KeyedStateHandle, id barrier.CheckpointID) int64 {
	if h.Incremental == nil {
		return h.Size
	}
	var n int64
	for _, f := range h.Incremental.Private {
		n += f.Size
	}
	for _, f := range h.Incremental.Shared {
		if strings.HasPrefix(path.Base(f.Path), fmt.Sprintf("%d-", id)) {
			n += f.Size
		}
	}
	return n
}

// BenchmarkSnapshotSync measures the synchronous part of a checkpoint of
// a pebble backend whose cache of 64 MiB (the default) is full, with as
// many dirty entries as it holds before writing back (DirtyBytes, by
// default a sixteenth of the cache): the part that holds the task's
// barrier. Each iteration dirties the cache again (not timed), takes the
// synchronous part (timed: sync-ms, and the process's CPU time meanwhile,
// pebble's flush included: sync-cpu-ms) and then runs the asynchronous part
// into file storage (not timed). Values are 8 bytes, so the cache holds
// about 440,000 keys, 28,000 of them dirty.
func BenchmarkSnapshotSync(b *testing.B) {
	const cacheBytes = pebble.DefaultCacheBytes
	keys, groups := benchKeySet(cacheBytes / cachedKeyBytes)
	for _, incremental := range []bool{false, true} {
		b.Run(fmt.Sprintf("incremental=%v", incremental), func(b *testing.B) {
			st, err := state.NewFileStorage(state.FileStorageConfig{Dir: b.TempDir()})
			require.NoError(b, err)
			kb, err := pebble.New(pebble.Config{Dir: b.TempDir(), Incremental: incremental})
			require.NoError(b, err)
			defer kb.Close()
			s, err := kb.Register("sum", state.KindValue)
			require.NoError(b, err)
			load(b, kb, s, keys, groups)
			w := state.StateWriterFactory(state.PrefixedWriters(st, "op"))
			if !incremental {
				w = state.FullSnapshotsOnly(w)
			}
			r := rand.New(rand.NewPCG(5, 6))
			var v [8]byte
			var sync, syncCPU time.Duration
			var dirty int64
			b.ResetTimer()
			for it := range b.N {
				b.StopTimer()
				// Dirty the cache up to its write-back threshold.
				for cs := kb.CacheStats(); cs.DirtyBytes < cs.DirtyLimit-2*cachedKeyBytes; cs = kb.CacheStats() {
					i := r.IntN(len(keys))
					kb.SetCurrentKey(keys[i], groups[i])
					binary.LittleEndian.PutUint64(v[:], uint64(it))
					require.NoError(b, kb.Put(s, nil, v[:]))
				}
				cs := kb.CacheStats()
				require.Greater(b, cs.Bytes, int64(cacheBytes*9/10), "the cache is not full")
				dirty += cs.DirtyBytes
				b.StartTimer()
				start, cpu0 := time.Now(), cputime.Process()
				f, err := kb.Snapshot(barrier.CheckpointID(it+1), w)
				sync += time.Since(start)
				syncCPU += cputime.Process() - cpu0
				b.StopTimer()
				require.NoError(b, err)
				_, err = f(context.Background())
				require.NoError(b, err)
				kb.NotifyCheckpointComplete(barrier.CheckpointID(it + 1))
				b.StartTimer()
			}
			b.ReportMetric(float64(sync.Microseconds())/1000/float64(b.N), "sync-ms")
			b.ReportMetric(float64(syncCPU.Microseconds())/1000/float64(b.N), "sync-cpu-ms")
			b.ReportMetric(float64(dirty)/float64(b.N), "dirty-B")
		})
	}
}
