package weir

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/state/pebble"
	"github.com/weirstream/weir/task"
)

// sumProbe keeps the last sum a reduce emitted per key.
type sumProbe map[int64]int64

func (p sumProbe) collect(v benchKV, _ int64) error {
	p[v.K] = v.V
	return nil
}

// A keyed reduce on pebble with a cache far smaller than its keys, fed
// buffer by buffer as a task feeds it (Prefetch with the buffer's records,
// then each record), prefetches the buffers' keys: the records' reads hit
// the cache, and every sum is the model's. Buffers are cut at random
// offsets, so that records span them; the keyed head (key groups on the
// wire, subtask 0 of 2) and the stamped head (one subtask, groups hashed
// here) both prefetch.
func TestPrefetchWarmsPebbleCache(t *testing.T) {
	for _, grouped := range []bool{true, false} {
		t.Run(fmt.Sprintf("grouped=%v", grouped), func(t *testing.T) {
			const maxPar = 128
			par := 1
			if grouped {
				par = 2
			}
			rng := keygroup.RangeFor(maxPar, par, 0)
			be, err := pebble.New(pebble.Config{Dir: t.TempDir(), MaxParallelism: maxPar, Parallelism: par, Index: 0,
				CacheBytes: 32 << 10, DirtyBytes: 8 << 10, MemTableSize: 1 << 20})
			require.NoError(t, err)
			defer be.Close()
			kc := &keyContext[benchKV, int64]{fn: func(x benchKV) int64 { return x.K }, kc: codec.Int64(), hash: codec.HashFunc(codec.Int64()), maxPar: maxPar}
			out := sumProbe{}
			op := &reduceOp[benchKV, int64]{opBase: opBase{name: "reduce", keyed: true, run: &task.CurrentOperator{}},
				kc: kc, fn: func(a, b benchKV) benchKV { return benchKV{a.K, a.V + b.V} }, next: out, codec: benchKVCodec}
			require.NoError(t, op.Open(&task.OperatorContext{Keyed: be}))
			var head task.Prefetcher = &stampedHead[benchKV]{c: benchKVCodec, next: op, pk: prefetcherOf[benchKV](op)}
			if grouped {
				head = newKeyedHead[benchKV](benchKVCodec, true, op, op, rng)
			}

			// 20,000 records of 5,000 keys of this subtask, framed as on
			// the wire.
			r := rand.New(rand.NewPCG(3, 4))
			var keys []int64
			for k := int64(0); len(keys) < 5000; k++ {
				if rng.Contains(keygroup.ForHash(codec.Int64().Hash(k), maxPar)) {
					keys = append(keys, k)
				}
			}
			model := map[int64]int64{}
			var stream []byte
			var want []benchKV
			for i := range 20000 {
				k := keys[r.IntN(len(keys))]
				v := int64(i%7 + 1)
				rec := benchRecord(k, v, int64(i), grouped, maxPar)
				stream = binary.BigEndian.AppendUint32(stream, uint32(len(rec)))
				stream = append(stream, rec...)
				model[k] += v
				want = append(want, benchKV{k, model[k]})
			}

			d := network.NewDeserializer("test", 0)
			defer d.Close()
			n := 0
			for len(stream) > 0 {
				cut := min(len(stream), 1000+r.IntN(2000))
				d.SetBuffer(buffer.Wrap(stream[:cut:cut], buffer.Data))
				stream = stream[cut:]
				require.NoError(t, head.Prefetch(d.Records))
				for {
					rec, ok, err := d.Next()
					require.NoError(t, err)
					if !ok {
						break
					}
					require.NoError(t, head.ProcessRecord(rec))
					w := want[n]
					require.Equal(t, w.V, out[w.K], "record %d, key %d", n, w.K)
					n++
				}
			}
			require.Equal(t, len(want), n)
			st := be.CacheStats()
			t.Logf("cache: %+v", st)
			require.Positive(t, st.Evicted, "the cache should be far smaller than the keys")
			require.Positive(t, st.Prefetched)
			// Misses: the records before prefetching paid (its first
			// decision), a record whose key a buffer's own prefetch
			// evicted again, and the first record of each buffer, which
			// began in the buffer before.
			require.Less(t, st.Misses, int64(n/10), "prefetching should have spared the records' reads")
		})
	}
}

// A key selector that panics while a buffer is prefetched leaves its
// operator marked running, so that the task's error names it, as when it
// panics on the record itself.
func TestPrefetchPanicNamesOperator(t *testing.T) {
	be, err := pebble.New(pebble.Config{Dir: t.TempDir(), CacheBytes: 16 << 10, MemTableSize: 1 << 20})
	require.NoError(t, err)
	defer be.Close()
	kc := &keyContext[benchKV, int64]{fn: func(x benchKV) int64 {
		if x.V < 0 {
			panic("boom")
		}
		return x.K
	}, kc: codec.Int64(), hash: codec.HashFunc(codec.Int64()), maxPar: be.MaxParallelism()}
	run := &task.CurrentOperator{}
	op := &reduceOp[benchKV, int64]{opBase: opBase{name: "reduce", keyed: true, run: run},
		kc: kc, fn: func(a, b benchKV) benchKV { return benchKV{a.K, a.V + b.V} }, next: discard[benchKV]{}, codec: benchKVCodec}
	require.NoError(t, op.Open(&task.OperatorContext{Keyed: be}))
	head := &stampedHead[benchKV]{c: benchKVCodec, next: op, pk: prefetcherOf[benchKV](op)}
	// Distinct keys, so that lookups miss and prefetching starts.
	for k := range int64(1000) {
		require.NoError(t, head.ProcessRecord(benchRecord(k, 1, 0, false, 0)))
	}
	run.Set(nil)
	var stream []byte
	for i, v := range []int64{1, 1, -1, 1} {
		rec := benchRecord(int64(2000+i), v, 0, false, 0)
		stream = binary.BigEndian.AppendUint32(stream, uint32(len(rec)))
		stream = append(stream, rec...)
	}
	d := network.NewDeserializer("test", 0)
	defer d.Close()
	d.SetBuffer(buffer.Wrap(stream, buffer.Data))
	func() {
		defer func() { require.Equal(t, "boom", recover()) }()
		_ = head.Prefetch(d.Records)
	}()
	require.Equal(t, "reduce", run.Name())
}
