package pebble

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	pdb "github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/internal/backendtest"
)

// intFlag is the value of the integer flag name (registered by the
// external test package's benchmarks), or def.
func intFlag(name string, def int64) int64 {
	if f := flag.Lookup(name); f != nil {
		if n, err := strconv.ParseInt(f.Value.String(), 10, 64); err == nil {
			return n
		}
	}
	return def
}

// BenchmarkReadFloor is the yardstick of BenchmarkStateBackend's cache
// misses: pebble's own point reads of random keys among -state.keys (8-byte
// values, compacted, the block cache set by -state.blockcache), below the
// backend and its cache. A keyed update that misses the write-back cache
// costs at least one of them, so with a cache of 1 % of the keys
// BenchmarkStateBackend cannot beat 1/(ns/read) updates per second.
//
// get is DB.Get, as the backend reads a miss. seek-sorted reads the keys
// of batches of 512 in key order through one iterator, the access a read
// batched per network buffer (Flink 2.0's asynchronous state) would make:
// the iterator keeps its tables open and seeks forward.
func BenchmarkReadFloor(b *testing.B) {
	n := int(intFlag("state.keys", 1<<20))
	be, err := New(Config{Dir: b.TempDir(), CacheBytes: -1, BlockCacheSize: intFlag("state.blockcache", 0) << 20})
	require.NoError(b, err)
	defer be.Close()
	s, err := be.Register("sum", state.KindValue)
	require.NoError(b, err)
	keys := make([][]byte, n)
	var v [8]byte
	for i := range keys {
		k := backendtest.Key(i)
		require.NoError(b, be.SetCurrentKey(k, backendtest.Group(k, be.maxPar)))
		dk, _, err := be.key(s, nil)
		require.NoError(b, err)
		keys[i] = bytes.Clone(dk)
		binary.LittleEndian.PutUint64(v[:], uint64(i))
		require.NoError(b, be.Put(s, nil, v[:]))
	}
	require.NoError(b, be.Compact(context.Background()))

	b.Run("get", func(b *testing.B) {
		r := rand.New(rand.NewPCG(1, 2))
		var sum uint64
		b.ResetTimer()
		for range b.N {
			val, closer, err := be.db.Get(keys[r.IntN(n)])
			if err != nil {
				b.Fatal(err)
			}
			sum += binary.LittleEndian.Uint64(val)
			_ = closer.Close()
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reads/s")
		_ = sum
	})
	b.Run("seek-sorted/batch=512", func(b *testing.B) {
		const batch = 512
		r := rand.New(rand.NewPCG(1, 2))
		it, err := be.db.NewIter(nil)
		require.NoError(b, err)
		defer it.Close()
		ks := make([][]byte, 0, batch)
		var sum uint64
		b.ResetTimer()
		for done := 0; done < b.N; {
			ks = ks[:0]
			for range min(batch, b.N-done) {
				ks = append(ks, keys[r.IntN(n)])
			}
			slices.SortFunc(ks, bytes.Compare)
			// A batch would see the writes before it: refresh the view.
			it.SetOptions(&pdb.IterOptions{})
			for _, k := range ks {
				if !it.SeekGE(k) || !bytes.Equal(it.Key(), k) {
					b.Fatalf("key %x not found", k)
				}
				sum += binary.LittleEndian.Uint64(it.Value())
			}
			done += len(ks)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reads/s")
		_ = sum
	})
}
