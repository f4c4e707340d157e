package heap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type int64Codec struct{}

func (int64Codec) Append(dst []byte, v int64) []byte {
	return binary.LittleEndian.AppendUint64(dst, uint64(v))
}
func (int64Codec) Decode(src []byte) (int64, error) {
	if len(src) != 8 {
		return 0, errors.New("int64: need 8 bytes")
	}
	return int64(binary.LittleEndian.Uint64(src)), nil
}

type stringCodec struct{}

func (stringCodec) Append(dst []byte, v string) []byte { return append(dst, v...) }
func (stringCodec) Decode(src []byte) (string, error)  { return string(src), nil }

func keyBytes(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)) }

func groupOf(k []byte, maxPar int) int {
	h := fnv.New64a()
	h.Write(k)
	return keygroup.ForHash(h.Sum64(), maxPar)
}

func newBackend(t testing.TB, cfg Config) *Backend {
	b, err := New(cfg)
	require.NoError(t, err)
	return b
}

var sumDesc = state.ValueDescriptor[int64]{Name: "sum", Codec: int64Codec{}}

// setKey sets key i on b (which must own its group).
func setKey(b *Backend, i int) {
	k := keyBytes(i)
	b.SetCurrentKey(k, groupOf(k, b.MaxParallelism()))
}

func readAll(t testing.TB, b *Backend, vs *state.ValueState[int64], n int) map[int]int64 {
	out := map[int]int64{}
	for i := range n {
		k := keyBytes(i)
		g := groupOf(k, b.MaxParallelism())
		if !b.KeyGroupRange().Contains(g) {
			continue
		}
		b.SetCurrentKey(k, g)
		v, err := vs.Value()
		require.NoError(t, err)
		out[i] = v
	}
	return out
}

func TestConfigValidation(t *testing.T) {
	require.NoError(t, Config{}.Validate())
	require.Error(t, Config{MaxParallelism: -1}.Validate())
	require.Error(t, Config{Parallelism: 4, Index: 4}.Validate())
	require.Error(t, Config{MaxParallelism: 4, Parallelism: 8}.Validate())
	b := newBackend(t, Config{})
	require.Equal(t, keygroup.Range{Start: 0, End: 127}, b.KeyGroupRange())
}

func TestRegisterKinds(t *testing.T) {
	b := newBackend(t, Config{})
	v1, err := state.GetValueState(b, sumDesc)
	require.NoError(t, err)
	v2, err := state.GetValueState(b, sumDesc)
	require.NoError(t, err)
	_, err = state.GetListState(b, state.ListDescriptor[int64]{Name: "sum", Codec: int64Codec{}})
	require.ErrorContains(t, err, `"sum" is registered as value`)
	require.ErrorContains(t, err, `requested as list`)
	setKey(b, 1)
	require.NoError(t, v1.Update(7))
	got, err := v2.Value()
	require.NoError(t, err)
	require.Equal(t, int64(7), got, "same name, same kind: same state")
	_, err = state.GetValueState(b, state.ValueDescriptor[int64]{Name: "x"})
	require.Error(t, err, "missing codec")
}

func TestAccessWithoutKey(t *testing.T) {
	b := newBackend(t, Config{})
	v, err := state.GetValueState(b, sumDesc)
	require.NoError(t, err)
	_, err = v.Value()
	require.ErrorContains(t, err, "without a current key")
}

// A key group of another subtask is refused with an error, not a panic.
func TestWrongKeyGroupRefused(t *testing.T) {
	b := newBackend(t, Config{Parallelism: 2, Index: 0})
	var kge *state.KeyGroupError
	require.ErrorAs(t, b.SetCurrentKey([]byte("k"), 100), &kge)
	require.Equal(t, 100, kge.Group)
}

func TestTypedStates(t *testing.T) {
	b := newBackend(t, Config{})
	list, err := state.GetListState(b, state.ListDescriptor[string]{Name: "l", Codec: stringCodec{}})
	require.NoError(t, err)
	m, err := state.GetMapState(b, state.MapDescriptor[string, int64]{Name: "m", KeyCodec: stringCodec{}, ValueCodec: int64Codec{}})
	require.NoError(t, err)
	red, err := state.GetReducingState(b, state.ReducingDescriptor[int64]{Name: "r", Codec: int64Codec{}, Reduce: func(a, b int64) int64 { return max(a, b) }})
	require.NoError(t, err)
	agg, err := state.GetAggregatingState(b, state.AggregatingDescriptor[int64, [2]int64, float64]{
		Name: "avg", AccCodec: pairCodec{}, NewAcc: func() [2]int64 { return [2]int64{} },
		Add:    func(a [2]int64, in int64) [2]int64 { return [2]int64{a[0] + in, a[1] + 1} },
		Result: func(a [2]int64) float64 { return float64(a[0]) / float64(a[1]) },
	})
	require.NoError(t, err)

	setKey(b, 1)
	require.NoError(t, list.Add("a"))
	require.NoError(t, list.Add("b"))
	require.NoError(t, m.Put("x", 1))
	require.NoError(t, m.Put("y", 2))
	for _, v := range []int64{3, 9, 4} {
		require.NoError(t, red.Add(v))
		require.NoError(t, agg.Add(v))
	}
	setKey(b, 3)
	for i, v := range []int64{5, 2, 7} {
		got, err := red.AddAndGet(v)
		require.NoError(t, err)
		require.Equal(t, []int64{5, 5, 7}[i], got)
		stored, ok, err := red.Get()
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, got, stored)
	}
	setKey(b, 2)
	require.NoError(t, list.Add("other"))
	empty, err := m.IsEmpty()
	require.NoError(t, err)
	require.True(t, empty)
	_, ok, err := red.Get()
	require.NoError(t, err)
	require.False(t, ok)

	setKey(b, 1)
	l, err := list.Get()
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, l)
	require.NoError(t, list.Update([]string{"z"}))
	l, _ = list.Get()
	require.Equal(t, []string{"z"}, l)
	v, ok, err := m.Get("y")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(2), v)
	require.NoError(t, m.Remove("y"))
	got := map[string]int64{}
	require.NoError(t, m.All(func(k string, v int64) bool { got[k] = v; return true }))
	require.Equal(t, map[string]int64{"x": 1}, got)
	r, ok, _ := red.Get()
	require.True(t, ok)
	require.Equal(t, int64(9), r)
	avg, ok, _ := agg.Get()
	require.True(t, ok)
	require.InDelta(t, 16.0/3, avg, 1e-9)
	require.NoError(t, m.Remove("x"))
	empty, _ = m.IsEmpty()
	require.True(t, empty)
	require.NoError(t, list.Clear())
	l, _ = list.Get()
	require.Nil(t, l)
}

type pairCodec struct{}

func (pairCodec) Append(dst []byte, v [2]int64) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(v[0]))
	return binary.LittleEndian.AppendUint64(dst, uint64(v[1]))
}
func (pairCodec) Decode(src []byte) ([2]int64, error) {
	if len(src) != 16 {
		return [2]int64{}, errors.New("pair: need 16 bytes")
	}
	return [2]int64{int64(binary.LittleEndian.Uint64(src)), int64(binary.LittleEndian.Uint64(src[8:]))}, nil
}

// The keyed-sum hot path (SetCurrentKey, Value, Update on an existing key
// with an 8-byte value) allocates nothing.
func TestHotPathZeroAllocs(t *testing.T) {
	b := newBackend(t, Config{})
	vs, err := state.GetValueState(b, sumDesc)
	require.NoError(t, err)
	const n = 1024
	keys, groups := prepKeys(b, n)
	for i := range n {
		b.SetCurrentKey(keys[i], groups[i])
		require.NoError(t, vs.Update(1))
	}
	i := 0
	allocs := testing.AllocsPerRun(10000, func() {
		j := i % n
		i++
		b.SetCurrentKey(keys[j], groups[j])
		v, _ := vs.Value()
		_ = vs.Update(v + 1)
	})
	require.Zero(t, allocs)

	// After a snapshot completes, entries are again updated in place.
	stor := state.NewMemoryStorage()
	run, err := b.Snapshot(1, stor)
	require.NoError(t, err)
	_, err = run(context.Background())
	require.NoError(t, err)
	for j := range n { // first write after the snapshot copies nothing now
		b.SetCurrentKey(keys[j], groups[j])
		require.NoError(t, vs.Update(2))
	}
	allocs = testing.AllocsPerRun(10000, func() {
		j := i % n
		i++
		b.SetCurrentKey(keys[j], groups[j])
		v, _ := vs.Value()
		_ = vs.Update(v + 1)
	})
	require.Zero(t, allocs)
}

func prepKeys(b *Backend, n int) ([][]byte, []int) {
	keys := make([][]byte, n)
	groups := make([]int, n)
	for i := range n {
		keys[i] = keyBytes(i)
		groups[i] = groupOf(keys[i], b.MaxParallelism())
	}
	return keys, groups
}

func BenchmarkKeyedSumHotPath(b *testing.B) {
	be := newBackend(b, Config{})
	vs, err := state.GetValueState(be, sumDesc)
	require.NoError(b, err)
	const n = 1 << 16
	keys, groups := prepKeys(be, n)
	for i := range n {
		be.SetCurrentKey(keys[i], groups[i])
		require.NoError(b, vs.Update(0))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		j := i & (n - 1)
		be.SetCurrentKey(keys[j], groups[j])
		v, _ := vs.Value()
		_ = vs.Update(v + 1)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// A snapshot contains exactly the values at the time of its synchronous
// part, although the task keeps writing (updates, inserts, deletes) while
// the asynchronous part runs on another goroutine. Run with -race.
func TestSnapshotConsistentUnderConcurrentWrites(t *testing.T) {
	b := newBackend(t, Config{})
	vs, err := state.GetValueState(b, sumDesc)
	require.NoError(t, err)
	ls, err := state.GetListState(b, state.ListDescriptor[int64]{Name: "l", Codec: int64Codec{}})
	require.NoError(t, err)
	ms, err := state.GetMapState(b, state.MapDescriptor[string, int64]{Name: "m", KeyCodec: stringCodec{}, ValueCodec: int64Codec{}})
	require.NoError(t, err)
	// Folded in place (state.Updater) unless a snapshot holds the entry.
	rdesc := state.ReducingDescriptor[int64]{Name: "r", Codec: int64Codec{}, Reduce: func(a, b int64) int64 { return a + b }}
	rs, err := state.GetReducingState(b, rdesc)
	require.NoError(t, err)
	const n = 5000
	for i := range n {
		setKey(b, i)
		require.NoError(t, vs.Update(int64(i)))
		_, err := rs.AddAndGet(int64(i))
		require.NoError(t, err)
		require.NoError(t, ls.Add(int64(i)))
		require.NoError(t, ms.Put("a", int64(i)))
	}
	stor := state.NewMemoryStorage()
	type result struct {
		h   *state.KeyedStateHandle
		err error
	}
	var snaps []chan result
	var wg sync.WaitGroup
	for round := range 3 {
		run, err := b.Snapshot(barrier.CheckpointID(round+1), stor)
		require.NoError(t, err)
		ch := make(chan result, 1)
		snaps = append(snaps, ch)
		wg.Go(func() {
			h, err := run(context.Background())
			ch <- result{h, err}
		})
		// Keep writing while the snapshot is written: each round adds
		// 1000*(round+1) to every value, appends, overwrites map entries,
		// deletes some keys and adds new ones.
		for i := range n {
			setKey(b, i)
			v, err := vs.Value()
			require.NoError(t, err)
			require.NoError(t, vs.Update(v+1000*int64(round+1)))
			r, err := rs.AddAndGet(1000 * int64(round+1))
			require.NoError(t, err)
			require.Equal(t, v+1000*int64(round+1), r)
			require.NoError(t, ls.Add(-1))
			require.NoError(t, ms.Put("a", -1))
			require.NoError(t, ms.Put(fmt.Sprint("new", round), -1))
		}
		for i := n + 100*round; i < n+100*(round+1); i++ {
			setKey(b, i)
			require.NoError(t, vs.Update(-1))
		}
	}
	wg.Wait()
	require.Zero(t, b.LiveSnapshots())
	offset := int64(0)
	for round, ch := range snaps {
		res := <-ch
		require.NoError(t, res.err)
		r := newBackend(t, Config{})
		require.NoError(t, r.Restore([]state.KeyedStateHandle{*res.h}, stor))
		rv, _ := state.GetValueState(r, sumDesc)
		rl, _ := state.GetListState(r, state.ListDescriptor[int64]{Name: "l", Codec: int64Codec{}})
		rm, _ := state.GetMapState(r, state.MapDescriptor[string, int64]{Name: "m", KeyCodec: stringCodec{}, ValueCodec: int64Codec{}})
		rr, _ := state.GetReducingState(r, rdesc)
		sid, _ := r.Register("sum", state.KindValue)
		require.Equal(t, n+100*round, r.NumEntries(sid), "round %d", round)
		for i := range n {
			setKey(r, i)
			v, err := rv.Value()
			require.NoError(t, err)
			require.Equal(t, int64(i)+offset, v, "round %d key %d", round, i)
			v, ok, err := rr.Get()
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, int64(i)+offset, v, "reducing state, round %d key %d", round, i)
			l, err := rl.Get()
			require.NoError(t, err)
			require.Len(t, l, 1+round)
			mm := map[string]int64{}
			require.NoError(t, rm.All(func(k string, v int64) bool { mm[k] = v; return true }))
			require.Len(t, mm, 1+round)
			if round == 0 {
				require.Equal(t, int64(i), mm["a"])
			}
		}
		offset += 1000 * int64(round+1)
	}
}

// Restore reads only the key groups of the new range: state written by
// two subtasks and restored into three (and back into one) is complete and
// not duplicated.
func TestRescale(t *testing.T) {
	const maxPar, n = 16, 2000
	stor := state.NewMemoryStorage()
	snapshot := func(bs []*Backend, id barrier.CheckpointID) []state.KeyedStateHandle {
		var hs []state.KeyedStateHandle
		for _, b := range bs {
			run, err := b.Snapshot(id, state.PrefixedWriters(stor, fmt.Sprint("sub", b.KeyGroupRange().Start)))
			require.NoError(t, err)
			h, err := run(context.Background())
			require.NoError(t, err)
			hs = append(hs, *h)
		}
		return hs
	}
	build := func(p int) []*Backend {
		var bs []*Backend
		for i := range p {
			bs = append(bs, newBackend(t, Config{MaxParallelism: maxPar, Parallelism: p, Index: i}))
		}
		return bs
	}
	two := build(2)
	for _, b := range two {
		vs, _ := state.GetValueState(b, sumDesc)
		for i := range n {
			k := keyBytes(i)
			if g := groupOf(k, maxPar); b.KeyGroupRange().Contains(g) {
				b.SetCurrentKey(k, g)
				require.NoError(t, vs.Update(int64(i*3)))
			}
		}
	}
	hs := snapshot(two, 1)
	for _, p := range []int{3, 1} {
		seen := 0
		bs := build(p)
		for _, b := range bs {
			require.NoError(t, b.Restore(hs, stor))
			vs, _ := state.GetValueState(b, sumDesc)
			for i, v := range readAll(t, b, vs, n) {
				require.Equal(t, int64(i*3), v)
				seen++
			}
			id, _ := b.Register("sum", state.KindValue)
			require.Equal(t, len(readAll(t, b, vs, n)), b.NumEntries(id))
		}
		require.Equal(t, n, seen, "parallelism %d", p)
	}
	// Wrong max parallelism is refused.
	b := newBackend(t, Config{MaxParallelism: 32})
	require.ErrorContains(t, b.Restore(hs, stor), "max parallelism")
}

// Compare the backend against a plain map model over random operations
// with random snapshots and restores.
func TestAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	b := newBackend(t, Config{MaxParallelism: 8})
	vs, _ := state.GetValueState(b, sumDesc)
	model := map[int]int64{}
	stor := state.NewMemoryStorage()
	var pending []func()
	for step := range 20000 {
		k := rng.IntN(300)
		setKey(b, k)
		switch op := rng.IntN(10); {
		case op < 6:
			v := rng.Int64N(1000)
			require.NoError(t, vs.Update(v))
			model[k] = v
		case op < 8:
			require.NoError(t, vs.Clear())
			delete(model, k)
		default:
			got, err := vs.Value()
			require.NoError(t, err)
			require.Equal(t, model[k], got)
		}
		if step%997 == 0 {
			want := map[int]int64{}
			for k, v := range model {
				want[k] = v
			}
			run, err := b.Snapshot(barrier.CheckpointID(step+1), stor)
			require.NoError(t, err)
			pending = append(pending, func() {
				h, err := run(context.Background())
				require.NoError(t, err)
				r := newBackend(t, Config{MaxParallelism: 8})
				require.NoError(t, r.Restore([]state.KeyedStateHandle{*h}, stor))
				rv, _ := state.GetValueState(r, sumDesc)
				got := map[int]int64{}
				for k := range 300 {
					setKey(r, k)
					if raw, ok, _ := r.Get(0, nil); ok {
						v, _ := int64Codec{}.Decode(raw)
						got[k] = v
					}
					_ = rv
				}
				require.Equal(t, want, got)
			})
			if len(pending) > 2 { // several snapshots in flight
				pending[0]()
				pending = pending[1:]
			}
		}
	}
	for _, p := range pending {
		p()
	}
	require.Zero(t, b.LiveSnapshots())
}

func TestSnapshotCancelled(t *testing.T) {
	b := newBackend(t, Config{})
	vs, _ := state.GetValueState(b, sumDesc)
	setKey(b, 1)
	require.NoError(t, vs.Update(1))
	run, err := b.Snapshot(1, state.NewMemoryStorage())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = run(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, b.LiveSnapshots(), "a cancelled snapshot is released")
	_, err = run(context.Background())
	require.ErrorContains(t, err, "called twice")
}

// discardFactory writes state files nowhere, to measure the backend alone.
type discardFactory struct{}

type discardWriter struct{ n int64 }

func (discardFactory) CreateStateWriter(barrier.CheckpointID, string) (state.StateWriter, error) {
	return &discardWriter{}, nil
}
func (w *discardWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }
func (w *discardWriter) Close() (state.StreamHandle, error) {
	return state.StreamHandle{Path: "discard", Size: w.n}, nil
}
func (w *discardWriter) Abort() error { return nil }

// BenchmarkSnapshot1MKeys measures the synchronous part (on the task
// goroutine) and the whole snapshot of 1M int64 keys over 128 key groups.
func BenchmarkSnapshot1MKeys(b *testing.B) {
	be := newBackend(b, Config{})
	vs, _ := state.GetValueState(be, sumDesc)
	const n = 1_000_000
	for i := range n {
		setKey(be, i)
		_ = vs.Update(int64(i))
	}
	var sync, total time.Duration
	id := barrier.CheckpointID(0)
	b.ResetTimer()
	for b.Loop() {
		id++
		start := time.Now()
		run, err := be.Snapshot(id, discardFactory{})
		if err != nil {
			b.Fatal(err)
		}
		sync += time.Since(start)
		if _, err := run(context.Background()); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(sync.Microseconds())/1000/float64(b.N), "sync-ms")
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "total-ms")
}

// Entries enumerates one state across every key and key group the backend
// serves (map states per user entry), leaves the current key alone, stops
// when told, and after a rescaled restore sees just the groups now owned.
func TestEntries(t *testing.T) {
	const maxPar, n = 16, 300
	b := newBackend(t, Config{MaxParallelism: maxPar})
	vs, err := state.GetValueState(b, sumDesc)
	require.NoError(t, err)
	ls, err := state.GetListState(b, state.ListDescriptor[int64]{Name: "l", Codec: int64Codec{}})
	require.NoError(t, err)
	ms, err := state.GetMapState(b, state.MapDescriptor[string, int64]{Name: "m", KeyCodec: stringCodec{}, ValueCodec: int64Codec{}})
	require.NoError(t, err)
	type rec struct {
		key   int
		group int
		uk    string
		v     int64
	}
	wantV, wantM := map[rec]bool{}, map[rec]bool{}
	for i := range n {
		setKey(b, i)
		g := groupOf(keyBytes(i), maxPar)
		require.NoError(t, vs.Update(int64(i)))
		wantV[rec{i, g, "", int64(i)}] = true
		require.NoError(t, ls.Add(int64(i)))
		for j := range i % 3 {
			require.NoError(t, ms.Put(fmt.Sprint("u", j), int64(i*10+j)))
			wantM[rec{i, g, fmt.Sprint("u", j), int64(i*10 + j)}] = true
		}
	}
	setKey(b, 7)
	collect := func(b *Backend, name string, kind state.Kind) map[rec]bool {
		id, err := b.Register(name, kind)
		require.NoError(t, err)
		got := map[rec]bool{}
		require.NoError(t, b.Entries(id, func(key []byte, g int, uk, v []byte) bool {
			k := int(binary.BigEndian.Uint64(key))
			require.Equal(t, groupOf(key, maxPar), g)
			r := rec{key: k, group: g}
			if kind == state.KindMap {
				r.uk = string(uk)
			} else {
				require.Nil(t, uk)
			}
			if kind != state.KindList {
				r.v, _ = int64Codec{}.Decode(v)
			}
			require.False(t, got[r], "entry %v twice", r)
			got[r] = true
			return true
		}))
		return got
	}
	require.Equal(t, wantV, collect(b, "sum", state.KindValue))
	require.Equal(t, wantM, collect(b, "m", state.KindMap))
	require.Len(t, collect(b, "l", state.KindList), n)
	key, g := b.CurrentKey()
	require.Equal(t, keyBytes(7), key)
	require.Equal(t, groupOf(keyBytes(7), maxPar), g)

	calls := 0
	require.NoError(t, b.Entries(0, func([]byte, int, []byte, []byte) bool { calls++; return calls < 5 }))
	require.Equal(t, 5, calls, "stops when fn returns false")
	require.Error(t, b.Entries(99, func([]byte, int, []byte, []byte) bool { return true }))

	// A snapshot restored into two subtasks: each sees its own groups only,
	// together everything once.
	stor := state.NewMemoryStorage()
	run, err := b.Snapshot(1, stor)
	require.NoError(t, err)
	h, err := run(context.Background())
	require.NoError(t, err)
	union := map[rec]bool{}
	for i := range 2 {
		r := newBackend(t, Config{MaxParallelism: maxPar, Parallelism: 2, Index: i})
		require.NoError(t, r.Restore([]state.KeyedStateHandle{*h}, stor))
		for e := range collect(r, "m", state.KindMap) {
			require.True(t, r.KeyGroupRange().Contains(e.group))
			union[e] = true
		}
	}
	require.Equal(t, wantM, union)
}
