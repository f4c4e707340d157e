package heap

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

// typedPair runs the same operations on a backend with serialized keys and
// on one with int64 keys (UseKeys), through every kind of typed state.
type typedPair struct {
	bytes, typed *Backend
	keys         *Keys[int64]
	hash         func(int64) uint64 // UseKeysHashed's; nil: UseKeys
	vs           [2]*state.ValueState[int64]
	ls           [2]*state.ListState[int64]
	ms           [2]*state.MapState[string, int64]
	rs           [2]*state.ReducingState[int64]
}

func newTypedPair(t *testing.T, cfg Config, hash func(int64) uint64) *typedPair {
	p := &typedPair{bytes: newBackend(t, cfg), typed: newBackend(t, cfg), hash: hash}
	var err error
	if hash != nil {
		p.keys, err = UseKeysHashed(p.typed, codec.Int64(), hash)
	} else {
		p.keys, err = UseKeys(p.typed, codec.Int64())
	}
	require.NoError(t, err)
	for i, b := range []*Backend{p.bytes, p.typed} {
		p.vs[i], err = state.GetValueState(b, sumDesc)
		require.NoError(t, err)
		p.ls[i], err = state.GetListState(b, state.ListDescriptor[int64]{Name: "l", Codec: int64Codec{}})
		require.NoError(t, err)
		p.ms[i], err = state.GetMapState(b, state.MapDescriptor[string, int64]{Name: "m", KeyCodec: stringCodec{}, ValueCodec: int64Codec{}})
		require.NoError(t, err)
		p.rs[i], err = state.GetReducingState(b, state.ReducingDescriptor[int64]{Name: "r", Codec: int64Codec{},
			Reduce: func(a, b int64) int64 { return a + b }})
		require.NoError(t, err)
	}
	return p
}

// setKey sets key k on both: by bytes on one, by value on the other.
func (p *typedPair) setKey(k int64) {
	kb := codec.Int64().Append(nil, k)
	h := codec.Int64().Hash(k)
	g := keygroup.ForHash(h, p.bytes.MaxParallelism())
	p.bytes.SetCurrentKey(kb, g)
	if p.hash != nil {
		h = p.hash(k)
	}
	p.keys.Set(k, g, h)
}

// dump returns every entry of b's states, serialized, sorted.
func dump(t testing.TB, b *Backend) []string {
	var out []string
	for id, m := range b.States() {
		require.NoError(t, b.Entries(state.StateID(id), func(key []byte, g int, uk, v []byte) bool {
			out = append(out, fmt.Sprintf("%s %d %x %x %x", m.Name, g, key, uk, v))
			return true
		}))
	}
	sort.Strings(out)
	return out
}

// A backend with int64 keys behaves as one with serialized keys over random
// operations on every kind of state, with snapshots in flight, and its
// snapshots restore (also rescaled, also into backends with int64 keys)
// to the same entries. hashed places the keys with UseKeysHashed and a
// hash of four values: long probe runs, and deletions that shift them.
func TestTypedKeysAgainstBytes(t *testing.T) {
	t.Run("own", func(t *testing.T) { testTypedKeysAgainstBytes(t, nil) })
	t.Run("hashed", func(t *testing.T) {
		testTypedKeysAgainstBytes(t, func(k int64) uint64 { return uint64(k&3) << 32 })
	})
}

func testTypedKeysAgainstBytes(t *testing.T, hash func(int64) uint64) {
	const maxPar = 16
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	p := newTypedPair(t, Config{MaxParallelism: maxPar}, hash)
	stor := state.NewMemoryStorage()
	type inflight struct {
		want   []string
		run    [2]state.KeyedSnapshotFunc
		prefix string
	}
	var pending []inflight
	check := func(f inflight) {
		var hs [2]*state.KeyedStateHandle
		for i, run := range f.run {
			h, err := run(context.Background())
			require.NoError(t, err)
			hs[i] = h
		}
		for i, h := range hs {
			for _, par := range []int{1, 2} {
				var got []string
				for idx := range par {
					r := newBackend(t, Config{MaxParallelism: maxPar, Parallelism: par, Index: idx})
					require.NoError(t, r.Restore([]state.KeyedStateHandle{*h}, stor))
					if (idx+i)%2 == 0 {
						_, err := UseKeys(r, codec.Int64())
						require.NoError(t, err)
					}
					got = append(got, dump(t, r)...)
				}
				sort.Strings(got)
				require.Equal(t, f.want, got, "snapshot %s of backend %d restored at parallelism %d", f.prefix, i, par)
			}
		}
	}
	for step := range 30000 {
		k := rng.Int64N(400) - 200
		p.setKey(k)
		v := rng.Int64N(1000)
		uk := fmt.Sprint("u", rng.IntN(4))
		for i := range 2 {
			var err error
			switch op := (step*7 + int(v)) % 11; op {
			case 0, 1:
				err = p.vs[i].Update(v)
			case 2:
				err = p.vs[i].Clear()
			case 3:
				err = p.ls[i].Add(v)
			case 4:
				if v%5 == 0 {
					err = p.ls[i].Clear()
				} else {
					err = p.ls[i].Update([]int64{v, v + 1})
				}
			case 5, 6:
				err = p.ms[i].Put(uk, v)
			case 7:
				err = p.ms[i].Remove(uk)
			case 8:
				_, err = p.rs[i].AddAndGet(v)
			case 9:
				err = p.rs[i].Clear()
			}
			require.NoError(t, err)
		}
		// Reads agree.
		v0, err0 := p.vs[0].Value()
		v1, err1 := p.vs[1].Value()
		require.NoError(t, err0)
		require.NoError(t, err1)
		require.Equal(t, v0, v1)
		l0, _ := p.ls[0].Get()
		l1, _ := p.ls[1].Get()
		require.Equal(t, l0, l1)
		m0, ok0, _ := p.ms[0].Get(uk)
		m1, ok1, _ := p.ms[1].Get(uk)
		require.Equal(t, ok0, ok1)
		require.Equal(t, m0, m1)
		kb, g := p.typed.CurrentKey()
		require.Equal(t, codec.Int64().Append(nil, k), kb)
		_, g0 := p.bytes.CurrentKey()
		require.Equal(t, g0, g)

		if step%1999 == 0 {
			want := dump(t, p.bytes)
			require.Equal(t, want, dump(t, p.typed), "step %d", step)
			f := inflight{want: want, prefix: fmt.Sprint(step)}
			for i, b := range []*Backend{p.bytes, p.typed} {
				run, err := b.Snapshot(barrier.CheckpointID(step+1), state.PrefixedWriters(stor, fmt.Sprint(step, "-", i)))
				require.NoError(t, err)
				f.run[i] = run
			}
			pending = append(pending, f)
			if len(pending) > 2 {
				check(pending[0])
				pending = pending[1:]
			}
		}
	}
	for _, f := range pending {
		check(f)
	}
	require.Zero(t, p.typed.LiveSnapshots())
}

// UseKeys after a restore converts the keys; keys that do not decode, or
// do not encode back to the same bytes, are refused.
func TestUseKeysConversion(t *testing.T) {
	b := newBackend(t, Config{MaxParallelism: 8})
	vs, err := state.GetValueState(b, sumDesc)
	require.NoError(t, err)
	for i := range 100 {
		setKey(b, i)
		require.NoError(t, vs.Update(int64(i)))
	}
	before := dump(t, b)
	keys, err := UseKeys(b, codec.Int64())
	require.NoError(t, err)
	require.Equal(t, before, dump(t, b))
	for i := range 100 {
		keys.Set(int64(i), groupOf(keyBytes(i), 8), codec.Int64().Hash(int64(i)))
		v, err := vs.Value()
		require.NoError(t, err)
		require.Equal(t, int64(i), v)
	}
	again, err := UseKeys(b, codec.Int64())
	require.NoError(t, err)
	require.Same(t, keys.c, again.c)
	_, err = UseKeys(b, codec.Int32())
	require.Error(t, err, "another key type")

	// A 3-byte key is no int64.
	b2 := newBackend(t, Config{MaxParallelism: 8})
	vs2, _ := state.GetValueState(b2, sumDesc)
	b2.SetCurrentKey([]byte("abc"), groupOf([]byte("abc"), 8))
	require.NoError(t, vs2.Update(1))
	_, err = UseKeys(b2, codec.Int64())
	require.ErrorContains(t, err, "616263")

	// String keys keep the backend as it is.
	b3 := newBackend(t, Config{MaxParallelism: 8})
	c3 := b3.s
	_, err = UseKeys(b3, codec.String())
	require.NoError(t, err)
	require.Equal(t, c3, b3.s)

	// A key group outside the range is refused with an error.
	k, err := UseKeys(newBackend(t, Config{MaxParallelism: 8, Parallelism: 2, Index: 1}), codec.Int64())
	require.NoError(t, err)
	var kge *state.KeyGroupError
	require.ErrorAs(t, k.Set(1, 0, codec.Int64().Hash(1)), &kge, "a key group outside the range")
	require.Equal(t, 0, kge.Group)
}

// KeySetter picks value keys for the built-in codecs with == semantics and
// leaves others (floats, custom codecs, other backends) to serialized keys.
func TestKeySetter(t *testing.T) {
	set, err := KeySetter[int64](newBackend(t, Config{}), codec.Int64())
	require.NoError(t, err)
	require.NotNil(t, set)
	sset, err := KeySetter[string](newBackend(t, Config{}), codec.String())
	require.NoError(t, err)
	require.NotNil(t, sset)
	fset, err := KeySetter[float64](newBackend(t, Config{}), codec.Float64())
	require.NoError(t, err)
	require.Nil(t, fset)
	cset, err := KeySetter[int64](newBackend(t, Config{}), int64Codec{})
	require.NoError(t, err)
	require.Nil(t, cset)
	nset, err := KeySetter[int64](&timerless{}, codec.Int64())
	require.NoError(t, err)
	require.Nil(t, nset)
}

type timerless struct{ state.KeyedBackend }

// The per-record path with int64 keys does not allocate.
func TestTypedHotPathZeroAllocs(t *testing.T) {
	b := newBackend(t, Config{})
	keys, err := UseKeys(b, codec.Int64())
	require.NoError(t, err)
	rs, err := state.GetReducingState(b, state.ReducingDescriptor[int64]{Name: "r", Codec: codec.Int64(),
		Reduce: func(a, b int64) int64 { return a + b }})
	require.NoError(t, err)
	groups := make([]int, 1024)
	for k := range groups {
		groups[k] = keygroup.ForHash(codec.Int64().Hash(int64(k)), b.MaxParallelism())
		keys.Set(int64(k), groups[k], codec.Int64().Hash(int64(k)))
		_, err := rs.AddAndGet(1)
		require.NoError(t, err)
	}
	i := 0
	allocs := testing.AllocsPerRun(10000, func() {
		k := i & 1023
		i++
		keys.Set(int64(k), groups[k], codec.Int64().Hash(int64(k)))
		_, _ = rs.AddAndGet(1)
	})
	require.Zero(t, allocs)
}

// BenchmarkBytesPerKey reports the heap the backend holds per key for 1M
// int64 keys with 8-byte values, keys serialized and by value.
func BenchmarkBytesPerKey(b *testing.B) {
	const n = 1_000_000
	for _, typed := range []bool{false, true} {
		b.Run(fmt.Sprintf("typed=%v", typed), func(b *testing.B) {
			for b.Loop() {
				before := heapInUse()
				be := newBackend(b, Config{})
				id, err := be.Register("sum", state.KindValue)
				require.NoError(b, err)
				var keys *Keys[int64]
				if typed {
					keys, _ = UseKeys(be, codec.Int64())
				}
				var kb, vb [8]byte
				for i := range int64(n) {
					h := codec.Int64().Hash(i)
					g := keygroup.ForHash(h, be.MaxParallelism())
					if typed {
						keys.Set(i, g, h)
					} else {
						binary.BigEndian.PutUint64(kb[:], uint64(i))
						be.SetCurrentKey(kb[:], g)
					}
					binary.BigEndian.PutUint64(vb[:], uint64(i))
					_ = be.Put(id, nil, vb[:])
				}
				b.ReportMetric(float64(heapInUse()-before)/n, "bytes/key")
				runtime.KeepAlive(be)
			}
		})
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkReduceByValue is the keyed sum's state access per record: set
// an int64 key by value (1,024 keys in turn, as the keyed-sum job does)
// and fold a 16-byte value into its reducing state.
func BenchmarkReduceByValue(b *testing.B) {
	type kv struct{ K, V int64 }
	kvc := codec.Struct2(codec.Int64(), func(x kv) int64 { return x.K }, codec.Int64(), func(x kv) int64 { return x.V },
		func(k, v int64) kv { return kv{k, v} })
	be := newBackend(b, Config{})
	keys, err := UseKeys(be, codec.Int64())
	require.NoError(b, err)
	rs, err := state.GetReducingState(be, state.ReducingDescriptor[kv]{Name: "r", Codec: kvc,
		Reduce: func(a, b kv) kv { return kv{a.K, a.V + b.V} }})
	require.NoError(b, err)
	const n = 1024
	var hashes [n]uint64
	var groups [n]int
	for k := range n {
		hashes[k] = codec.Int64().Hash(int64(k))
		groups[k] = keygroup.ForHash(hashes[k], be.MaxParallelism())
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := i & (n - 1)
		keys.Set(int64(k), groups[k], hashes[k])
		if _, err := rs.AddAndGet(kv{int64(k), int64(i)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
