// Package backendtest is the conformance suite of state.KeyedBackend: every
// backend runs the same tests (every state kind, snapshot and restore,
// key-group iteration, rescaling) and the same model-based property test
// against a map, so that backends are interchangeable.
package backendtest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

// Factory creates a backend for subtask index of parallelism par with
// maxPar key groups. The suite closes every backend it creates.
type Factory func(t testing.TB, maxPar, par, index int) state.KeyedBackend

// Run runs the conformance suite against the backends f creates.
func Run(t *testing.T, f Factory) {
	t.Run("Register", func(t *testing.T) { testRegister(t, f) })
	t.Run("Bytes", func(t *testing.T) { testBytes(t, f) })
	t.Run("TypedStates", func(t *testing.T) { testTyped(t, f) })
	t.Run("SnapshotRestore", func(t *testing.T) { testSnapshotRestore(t, f) })
	t.Run("SnapshotIsolation", func(t *testing.T) { testSnapshotIsolation(t, f) })
	t.Run("Entries", func(t *testing.T) { testEntries(t, f) })
	t.Run("Rescale", func(t *testing.T) { Rescale(t, f, f) })
	t.Run("CloseWithSnapshotInFlight", func(t *testing.T) { testCloseInFlight(t, f) })
	t.Run("TTL", func(t *testing.T) { testTTL(t, f) })
}

// ttlStates are one state of each kind with the same TTL and clock.
type ttlStates struct {
	val  *state.ValueState[int64]
	list *state.ListState[int64]
	m    *state.MapState[string, int64]
	red  *state.ReducingState[int64]
	agg  *state.AggregatingState[int64, int64, int64]
}

func newTTLStates(t testing.TB, b state.KeyedBackend, ttl state.TTL) ttlStates {
	var s ttlStates
	var err error
	s.val, err = state.GetValueState(b, state.ValueDescriptor[int64]{Name: "v", Codec: Int64{}, Default: -1, TTL: ttl})
	require.NoError(t, err)
	s.list, err = state.GetListState(b, state.ListDescriptor[int64]{Name: "l", Codec: Int64{}, TTL: ttl})
	require.NoError(t, err)
	s.m, err = state.GetMapState(b, state.MapDescriptor[string, int64]{Name: "m", KeyCodec: String{}, ValueCodec: Int64{}, TTL: ttl})
	require.NoError(t, err)
	s.red, err = state.GetReducingState(b, state.ReducingDescriptor[int64]{Name: "r", Codec: Int64{}, Reduce: func(a, b int64) int64 { return a + b }, TTL: ttl})
	require.NoError(t, err)
	s.agg, err = state.GetAggregatingState(b, state.AggregatingDescriptor[int64, int64, int64]{Name: "a", AccCodec: Int64{},
		NewAcc: func() int64 { return 0 }, Add: func(a, in int64) int64 { return a + in }, Result: func(a int64) int64 { return a }, TTL: ttl})
	require.NoError(t, err)
	return s
}

// testTTL: values expire TTL after their last write, are never returned
// after, and full snapshots leave them out.
func testTTL(t *testing.T, f Factory) {
	var now atomic.Int64
	now.Store(1000)
	ttl := state.TTL{TTL: 10 * time.Millisecond, Now: func() time.Time { return time.UnixMilli(now.Load()) }}
	b := open(t, f, 128, 1, 0)
	s := newTTLStates(t, b, ttl)
	setKey(b, 1)
	require.NoError(t, s.val.Update(7))
	require.NoError(t, s.list.Add(1))
	require.NoError(t, s.m.Put("a", 1))
	require.NoError(t, s.red.Add(5))
	require.NoError(t, s.agg.Add(5))
	setKey(b, 2)
	require.NoError(t, s.val.Update(8)) // key 2: written again later

	now.Store(1005)
	require.NoError(t, s.val.Update(9))
	setKey(b, 1)
	require.NoError(t, s.list.Add(2))
	require.NoError(t, s.m.Put("b", 2))
	v, err := s.val.Value()
	require.NoError(t, err)
	require.Equal(t, int64(7), v, "alive until TTL after its write")

	now.Store(1012) // the writes at 1000 expired, those at 1005 live
	v, err = s.val.Value()
	require.NoError(t, err)
	require.Equal(t, int64(-1), v, "expired: the default")
	_, ok, err := b.Get(0, nil)
	require.NoError(t, err)
	require.False(t, ok, "an expired value read is deleted")
	l, err := s.list.Get()
	require.NoError(t, err)
	require.Equal(t, []int64{2}, l, "list elements expire one by one")
	_, ok, err = s.m.Get("a")
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = s.m.Contains("b")
	require.NoError(t, err)
	require.True(t, ok)
	all := map[string]int64{}
	require.NoError(t, s.m.All(func(k string, v int64) bool { all[k] = v; return true }))
	require.Equal(t, map[string]int64{"b": 2}, all)
	_, ok, err = s.red.Get()
	require.NoError(t, err)
	require.False(t, ok)
	got, err := s.red.AddAndGet(3)
	require.NoError(t, err)
	require.Equal(t, int64(3), got, "an expired reduced value starts over")
	_, ok, err = s.agg.Get()
	require.NoError(t, err)
	require.False(t, ok)
	setKey(b, 2)
	v, err = s.val.Value()
	require.NoError(t, err)
	require.Equal(t, int64(9), v, "a write renews the TTL")

	// A full snapshot leaves out what expired.
	st := MemStorage()
	h := Snap(t, state.KeyedBackend(b), 1, state.FullSnapshotsOnly(st), "ttl")
	r := open(t, f, 128, 1, 0)
	require.NoError(t, r.Restore([]state.KeyedStateHandle{h}, st))
	rs := newTTLStates(t, r, ttl)
	d := Dump(t, r)
	require.Len(t, d, 4, "key 2's value, key 1's list (one element), map entry b, reduced value: %v", d)
	setKey(r, 1)
	l, err = rs.list.Get()
	require.NoError(t, err)
	require.Equal(t, []int64{2}, l)
	now.Store(2000)
	l, err = rs.list.Get()
	require.NoError(t, err)
	require.Empty(t, l)
}

func open(t testing.TB, f Factory, maxPar, par, index int) state.KeyedBackend {
	b := f(t, maxPar, par, index)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	return b
}

// Int64 is a little-endian int64 codec.
type Int64 struct{}

// Append implements codec.Codec.
func (Int64) Append(dst []byte, v int64) []byte {
	return binary.LittleEndian.AppendUint64(dst, uint64(v))
}

// Decode implements codec.Codec.
func (Int64) Decode(src []byte) (int64, error) {
	if len(src) != 8 {
		return 0, errors.New("int64: need 8 bytes")
	}
	return int64(binary.LittleEndian.Uint64(src)), nil
}

// String is a codec of strings as their bytes.
type String struct{}

// Append implements codec.Codec.
func (String) Append(dst []byte, v string) []byte { return append(dst, v...) }

// Decode implements codec.Codec.
func (String) Decode(src []byte) (string, error) { return string(src), nil }

// Key is the serialized key i.
func Key(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)) }

// Group is the key group of a serialized key.
func Group(k []byte, maxPar int) int {
	h := fnv.New64a()
	h.Write(k)
	return keygroup.ForHash(h.Sum64(), maxPar)
}

func setKey(b state.KeyedBackend, i int) bool {
	k := Key(i)
	g := Group(k, b.MaxParallelism())
	if !b.KeyGroupRange().Contains(g) {
		return false
	}
	b.SetCurrentKey(k, g)
	return true
}

func testRegister(t *testing.T, f Factory) {
	b := open(t, f, 128, 1, 0)
	desc := state.ValueDescriptor[int64]{Name: "sum", Codec: Int64{}}
	v1, err := state.GetValueState(b, desc)
	require.NoError(t, err)
	v2, err := state.GetValueState(b, desc)
	require.NoError(t, err)
	_, err = b.Register("sum", state.KindList)
	require.ErrorContains(t, err, `"sum" is registered as value, requested as list`)
	_, err = state.GetListState(b, state.ListDescriptor[int64]{Name: "sum", Codec: Int64{}})
	require.ErrorContains(t, err, `"sum"`) // the backend's error, or the schemas' if it keeps them
	require.Equal(t, []state.StateMeta{{Name: "sum", Kind: state.KindValue}}, b.States())

	_, err = v1.Value()
	require.ErrorContains(t, err, "without a current key")
	k, g := b.CurrentKey()
	require.Nil(t, k)
	require.Equal(t, -1, g)

	setKey(b, 1)
	require.NoError(t, v1.Update(7))
	got, err := v2.Value()
	require.NoError(t, err)
	require.Equal(t, int64(7), got, "same name, same kind: same state")
	k, g = b.CurrentKey()
	require.Equal(t, Key(1), k)
	require.Equal(t, Group(Key(1), 128), g)

	_, _, err = b.Get(99, nil)
	require.Error(t, err, "unknown state id")

	half := open(t, f, 128, 2, 0)
	require.Equal(t, keygroup.Range{Start: 0, End: 63}, half.KeyGroupRange())
	// A key group of another subtask is bad input, not a crash: refused
	// with an error naming it, the current key unchanged.
	require.NoError(t, half.SetCurrentKey([]byte("a"), 3))
	for _, g := range []int{64, 100, 127, 128, -1} {
		var kge *state.KeyGroupError
		require.ErrorAs(t, half.SetCurrentKey([]byte("k"), g), &kge, "group %d", g)
		require.Equal(t, g, kge.Group)
		require.Equal(t, half.KeyGroupRange(), kge.Range)
		k, kg := half.CurrentKey()
		require.Equal(t, []byte("a"), k)
		require.Equal(t, 3, kg)
	}
}

func testBytes(t *testing.T, f Factory) {
	b := open(t, f, 16, 1, 0)
	val, err := b.Register("v", state.KindValue)
	require.NoError(t, err)
	list, err := b.Register("l", state.KindList)
	require.NoError(t, err)
	m, err := b.Register("m", state.KindMap)
	require.NoError(t, err)

	b.SetCurrentKey([]byte("a"), 3)
	_, ok, err := b.Get(val, nil)
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, b.Put(val, nil, []byte("x")))
	require.NoError(t, b.Put(val, nil, []byte{}))
	v, ok, err := b.Get(val, nil)
	require.NoError(t, err)
	require.True(t, ok, "an empty value is a value")
	require.Empty(t, v)
	require.NoError(t, b.Delete(val, nil))
	require.NoError(t, b.Delete(val, nil), "deleting a missing entry")
	_, ok, err = b.Get(val, nil)
	require.NoError(t, err)
	require.False(t, ok)

	require.NoError(t, b.Append(list, []byte("ab")))
	require.NoError(t, b.Append(list, []byte("c")))
	v, ok, err = b.Get(list, nil)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "abc", string(v))
	require.NoError(t, b.Put(list, nil, []byte("z")))
	require.NoError(t, b.Append(list, []byte("y")))
	v, _, err = b.Get(list, nil)
	require.NoError(t, err)
	require.Equal(t, "zy", string(v))
	require.Error(t, b.Append(m, []byte("x")), "Append on a map state")
	require.Error(t, b.Iterate(val, func([]byte, []byte) bool { return true }), "Iterate on a value state")

	// Map entries of key "a" must not leak into key "ab" or the other way
	// round, nor across key groups.
	require.NoError(t, b.Put(m, []byte("k1"), []byte("1")))
	require.NoError(t, b.Put(m, []byte(""), []byte("empty")))
	b.SetCurrentKey([]byte("ab"), 3)
	require.NoError(t, b.Put(m, []byte("k2"), []byte("2")))
	b.SetCurrentKey([]byte("a"), 4)
	require.NoError(t, b.Put(m, []byte("k3"), []byte("3")))
	b.SetCurrentKey([]byte("a"), 3)
	require.Equal(t, map[string]string{"k1": "1", "": "empty"}, iterate(t, b, m))
	v, ok, err = b.Get(m, []byte("k1"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "1", string(v))
	require.NoError(t, b.Delete(m, []byte("k1")))
	require.Equal(t, map[string]string{"": "empty"}, iterate(t, b, m))
	require.NoError(t, b.Clear(m))
	require.Empty(t, iterate(t, b, m))
	b.SetCurrentKey([]byte("ab"), 3)
	require.Equal(t, map[string]string{"k2": "2"}, iterate(t, b, m))
	b.SetCurrentKey([]byte("a"), 4)
	require.Equal(t, map[string]string{"k3": "3"}, iterate(t, b, m))

	// Stopping an iteration early.
	require.NoError(t, b.Put(m, []byte("k4"), []byte("4")))
	n := 0
	require.NoError(t, b.Iterate(m, func([]byte, []byte) bool { n++; return false }))
	require.Equal(t, 1, n)
}

func iterate(t testing.TB, b state.KeyedBackend, s state.StateID) map[string]string {
	out := map[string]string{}
	require.NoError(t, b.Iterate(s, func(uk, v []byte) bool {
		out[string(uk)] = string(v)
		return true
	}))
	return out
}

type pair struct{}

func (pair) Append(dst []byte, v [2]int64) []byte {
	return Int64{}.Append(Int64{}.Append(dst, v[0]), v[1])
}
func (pair) Decode(src []byte) ([2]int64, error) {
	if len(src) != 16 {
		return [2]int64{}, errors.New("pair: need 16 bytes")
	}
	a, _ := Int64{}.Decode(src[:8])
	c, _ := Int64{}.Decode(src[8:])
	return [2]int64{a, c}, nil
}

func testTyped(t *testing.T, f Factory) {
	b := open(t, f, 128, 1, 0)
	list, err := state.GetListState(b, state.ListDescriptor[string]{Name: "l", Codec: String{}})
	require.NoError(t, err)
	m, err := state.GetMapState(b, state.MapDescriptor[string, int64]{Name: "m", KeyCodec: String{}, ValueCodec: Int64{}})
	require.NoError(t, err)
	red, err := state.GetReducingState(b, state.ReducingDescriptor[int64]{Name: "r", Codec: Int64{}, Reduce: func(a, b int64) int64 { return max(a, b) }})
	require.NoError(t, err)
	agg, err := state.GetAggregatingState(b, state.AggregatingDescriptor[int64, [2]int64, float64]{
		Name: "avg", AccCodec: pair{}, NewAcc: func() [2]int64 { return [2]int64{} },
		Add:    func(a [2]int64, in int64) [2]int64 { return [2]int64{a[0] + in, a[1] + 1} },
		Result: func(a [2]int64) float64 { return float64(a[0]) / float64(a[1]) },
	})
	require.NoError(t, err)
	val, err := state.GetValueState(b, state.ValueDescriptor[int64]{Name: "v", Codec: Int64{}, Default: -1})
	require.NoError(t, err)

	setKey(b, 1)
	got, err := val.Value()
	require.NoError(t, err)
	require.Equal(t, int64(-1), got, "default")
	require.NoError(t, val.Update(5))
	require.NoError(t, list.Add("a"))
	require.NoError(t, list.Add("b"))
	require.NoError(t, m.Put("x", 1))
	require.NoError(t, m.Put("y", 2))
	for _, v := range []int64{3, 9, 4} {
		require.NoError(t, red.Add(v))
		require.NoError(t, agg.Add(v))
	}
	setKey(b, 2)
	require.NoError(t, list.Add("other"))

	setKey(b, 1)
	l, err := list.Get()
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, l)
	require.NoError(t, list.Update([]string{"c"}))
	l, err = list.Get()
	require.NoError(t, err)
	require.Equal(t, []string{"c"}, l)
	mv, ok, err := m.Get("y")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(2), mv)
	r, _, err := red.Get()
	require.NoError(t, err)
	require.Equal(t, int64(9), r)
	a, _, err := agg.Get()
	require.NoError(t, err)
	require.InDelta(t, 16.0/3, a, 1e-9)
	v, err := val.Value()
	require.NoError(t, err)
	require.Equal(t, int64(5), v)

	require.NoError(t, list.Clear())
	require.NoError(t, m.Clear())
	require.NoError(t, val.Clear())
	l, err = list.Get()
	require.NoError(t, err)
	require.Empty(t, l)
	_, ok, err = m.Get("x")
	require.NoError(t, err)
	require.False(t, ok)
	setKey(b, 2)
	l, err = list.Get()
	require.NoError(t, err)
	require.Equal(t, []string{"other"}, l)
}

// MemStorage is an in-memory checkpoint storage for the suite.
func MemStorage() *state.FileStorage { return state.NewMemoryStorage() }

// Snap snapshots b as checkpoint id into st and returns the handle.
func Snap(t require.TestingT, b state.KeyedBackend, id barrier.CheckpointID, st state.StateWriterFactory, prefix string) state.KeyedStateHandle {
	f, err := b.Snapshot(id, state.PrefixedWriters(st, prefix))
	require.NoError(t, err)
	h, err := f(context.Background())
	require.NoError(t, err)
	return *h
}

// fill writes a mix of every kind for keys [0, n) that b owns: value i,
// list [i, i+1], map {"a": i, "b": -i}.
func fill(t testing.TB, b state.KeyedBackend, n int) {
	val, err := b.Register("v", state.KindValue)
	require.NoError(t, err)
	list, err := b.Register("l", state.KindList)
	require.NoError(t, err)
	m, err := b.Register("m", state.KindMap)
	require.NoError(t, err)
	for i := range n {
		if !setKey(b, i) {
			continue
		}
		require.NoError(t, b.Put(val, nil, Int64{}.Append(nil, int64(i))))
		require.NoError(t, b.Append(list, Int64{}.Append(nil, int64(i))))
		require.NoError(t, b.Append(list, Int64{}.Append(nil, int64(i+1))))
		require.NoError(t, b.Put(m, []byte("a"), Int64{}.Append(nil, int64(i))))
		require.NoError(t, b.Put(m, []byte("b"), Int64{}.Append(nil, int64(-i))))
	}
}

// Dump returns every entry of every state of b as "state/key/userKey" →
// value, through Entries.
func Dump(t testing.TB, b state.KeyedBackend) map[string]string {
	out := map[string]string{}
	for i, m := range b.States() {
		require.NoError(t, b.Entries(state.StateID(i), func(key []byte, g int, uk, v []byte) bool {
			require.Equal(t, Group(key, b.MaxParallelism()), g, "key group of %x", key)
			require.True(t, b.KeyGroupRange().Contains(g))
			out[fmt.Sprintf("%s/%x/%x", m.Name, key, uk)] = string(v)
			return true
		}))
	}
	return out
}

func testSnapshotRestore(t *testing.T, f Factory) {
	st := MemStorage()
	b := open(t, f, 128, 1, 0)
	fill(t, b, 300)
	want := Dump(t, b)
	require.Len(t, want, 300*4)
	h := Snap(t, b, 1, st, "a")

	r := open(t, f, 128, 1, 0)
	require.NoError(t, r.Restore([]state.KeyedStateHandle{h}, st))
	require.Equal(t, want, Dump(t, r))
	k, g := r.CurrentKey()
	require.Nil(t, k, "restore leaves no current key")
	require.Equal(t, -1, g)
	require.ElementsMatch(t, b.States(), r.States())

	// An empty backend snapshots and restores too.
	e := open(t, f, 128, 1, 0)
	h = Snap(t, e, 2, st, "e")
	r2 := open(t, f, 128, 1, 0)
	require.NoError(t, r2.Restore([]state.KeyedStateHandle{h}, st))
	require.Empty(t, Dump(t, r2))
}

func testSnapshotIsolation(t *testing.T, f Factory) {
	st := MemStorage()
	b := open(t, f, 128, 1, 0)
	fill(t, b, 100)
	want := Dump(t, b)
	snap, err := b.Snapshot(1, state.PrefixedWriters(st, "a"))
	require.NoError(t, err)
	// Writes after the synchronous part do not reach the snapshot.
	val, _ := b.Register("v", state.KindValue)
	list, _ := b.Register("l", state.KindList)
	m, _ := b.Register("m", state.KindMap)
	for i := range 100 {
		setKey(b, i)
		require.NoError(t, b.Put(val, nil, []byte("changed")))
		require.NoError(t, b.Append(list, []byte("more")))
		require.NoError(t, b.Clear(m))
	}
	h, err := snap(context.Background())
	require.NoError(t, err)
	r := open(t, f, 128, 1, 0)
	require.NoError(t, r.Restore([]state.KeyedStateHandle{*h}, st))
	require.Equal(t, want, Dump(t, r))

	// A cancelled asynchronous part fails and releases its resources.
	snap, err = b.Snapshot(2, state.PrefixedWriters(st, "b"))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = snap(ctx)
	require.ErrorIs(t, err, context.Canceled)
}

func testEntries(t *testing.T, f Factory) {
	b := open(t, f, 32, 2, 1)
	fill(t, b, 200)
	got := Dump(t, b)
	n := 0
	for i := range 200 {
		if b.KeyGroupRange().Contains(Group(Key(i), 32)) {
			n++
			require.Equal(t, string(Int64{}.Append(nil, int64(i))), got[fmt.Sprintf("v/%x/", Key(i))])
			require.Equal(t, string(Int64{}.Append(nil, int64(-i))), got[fmt.Sprintf("m/%x/%x", Key(i), "b")])
		}
	}
	require.Len(t, got, 4*n)
	// Stopping early.
	calls := 0
	require.NoError(t, b.Entries(0, func([]byte, int, []byte, []byte) bool { calls++; return false }))
	require.Equal(t, 1, calls)
}

// Rescale writes state at parallelism 2 with from, restores it at 3 with
// to, then at 1 with from, and checks that every key's state arrives
// exactly once, wherever it is owned.
func Rescale(t *testing.T, from, to Factory) {
	const maxPar, n = 32, 400
	st := MemStorage()
	var all map[string]string = map[string]string{}
	var handles []state.KeyedStateHandle
	for i := range 2 {
		b := open(t, from, maxPar, 2, i)
		fill(t, b, n)
		maps.Copy(all, Dump(t, b))
		handles = append(handles, Snap(t, b, 1, st, fmt.Sprintf("p2-%d", i)))
	}
	require.Len(t, all, 4*n)

	var handles3 []state.KeyedStateHandle
	union := map[string]string{}
	for i := range 3 {
		b := open(t, to, maxPar, 3, i)
		require.NoError(t, b.Restore(handles, st))
		d := Dump(t, b)
		for k, v := range d {
			_, dup := union[k]
			require.False(t, dup, "%s restored twice", k)
			union[k] = v
		}
		handles3 = append(handles3, Snap(t, b, 2, st, fmt.Sprintf("p3-%d", i)))
	}
	require.Equal(t, all, union)

	one := open(t, from, maxPar, 1, 0)
	// Handles in any order.
	slices.Reverse(handles3)
	require.NoError(t, one.Restore(handles3, st))
	require.Equal(t, all, Dump(t, one))
}

func testCloseInFlight(t *testing.T, f Factory) {
	st := MemStorage()
	b := f(t, 128, 1, 0)
	fill(t, b, 50)
	want := Dump(t, b)
	snap, err := b.Snapshot(1, state.PrefixedWriters(st, "a"))
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "idempotent")
	h, err := snap(context.Background())
	require.NoError(t, err, "a snapshot in flight outlives Close")
	r := open(t, f, 128, 1, 0)
	require.NoError(t, r.Restore([]state.KeyedStateHandle{*h}, st))
	require.Equal(t, want, Dump(t, r))
}

// Model checks the backends f creates against a map, over random histories
// of writes, reads, snapshots and restores (from any earlier snapshot).
func Model(t *testing.T, f Factory) {
	rapid.Check(t, func(rt *rapid.T) {
		m := &model{t: rt, tb: t, f: f, st: MemStorage()}
		m.b = m.newBackend()
		defer func() { require.NoError(rt, m.b.Close()) }()
		rt.Repeat(map[string]func(*rapid.T){
			"":         m.check,
			"setKey":   m.setKey,
			"put":      m.put,
			"append":   m.append,
			"delete":   m.delete,
			"clear":    m.clear,
			"get":      m.get,
			"update":   m.update,
			"iterate":  m.iterate,
			"snapshot": m.snapshot,
			"restore":  m.restore,
		})
	})
}

const modelMaxPar = 8

type modelSnap struct {
	h    state.KeyedStateHandle
	data map[string]string
}

type model struct {
	t     *rapid.T
	tb    testing.TB // for the factory
	f     Factory
	st    *state.FileStorage
	b     state.KeyedBackend
	ids   [3]state.StateID // value, list, map
	data  map[string]string
	key   []byte
	group int
	snaps []modelSnap
	next  barrier.CheckpointID
}

var kinds = [3]state.Kind{state.KindValue, state.KindList, state.KindMap}

func (m *model) newBackend(restore ...state.KeyedStateHandle) state.KeyedBackend {
	b := m.f(m.tb, modelMaxPar, 1, 0)
	if len(restore) > 0 {
		require.NoError(m.t, b.Restore(restore, m.st))
	}
	for i, k := range kinds {
		id, err := b.Register(fmt.Sprintf("s%d", i), k)
		require.NoError(m.t, err)
		m.ids[i] = id
	}
	m.data = map[string]string{}
	m.key = nil
	return b
}

func (m *model) mk(s int, uk []byte) string {
	return fmt.Sprintf("%d/%d/%x/%x", s, m.group, m.key, uk)
}

func (m *model) setKey(t *rapid.T) {
	m.key = []byte(rapid.SampledFrom([]string{"", "a", "ab", "b", "\xff"}).Draw(t, "key"))
	m.group = rapid.IntRange(0, modelMaxPar-1).Draw(t, "group")
	m.b.SetCurrentKey(m.key, m.group)
}

func (m *model) needKey(t *rapid.T) {
	if m.key == nil {
		t.Skip("no current key")
	}
}

func (m *model) userKey(t *rapid.T, s int) []byte {
	if kinds[s] != state.KindMap {
		return nil
	}
	return []byte(rapid.SampledFrom([]string{"", "x", "xy", "\x00"}).Draw(t, "userKey"))
}

func (m *model) put(t *rapid.T) {
	m.needKey(t)
	s := rapid.IntRange(0, 2).Draw(t, "state")
	uk := m.userKey(t, s)
	v := rapid.SliceOfN(rapid.Byte(), 0, 4).Draw(t, "value")
	require.NoError(t, m.b.Put(m.ids[s], uk, v))
	m.data[m.mk(s, uk)] = string(v)
}

func (m *model) append(t *rapid.T) {
	m.needKey(t)
	v := rapid.SliceOfN(rapid.Byte(), 0, 4).Draw(t, "value")
	require.NoError(t, m.b.Append(m.ids[1], v))
	m.data[m.mk(1, nil)] += string(v)
}

func (m *model) delete(t *rapid.T) {
	m.needKey(t)
	s := rapid.IntRange(0, 2).Draw(t, "state")
	uk := m.userKey(t, s)
	require.NoError(t, m.b.Delete(m.ids[s], uk))
	delete(m.data, m.mk(s, uk))
}

func (m *model) clear(t *rapid.T) {
	m.needKey(t)
	s := rapid.IntRange(0, 2).Draw(t, "state")
	require.NoError(t, m.b.Clear(m.ids[s]))
	prefix := m.mk(s, nil)
	for k := range m.data {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			delete(m.data, k)
		}
	}
}

func (m *model) get(t *rapid.T) {
	m.needKey(t)
	s := rapid.IntRange(0, 2).Draw(t, "state")
	uk := m.userKey(t, s)
	v, ok, err := m.b.Get(m.ids[s], uk)
	require.NoError(t, err)
	want, wok := m.data[m.mk(s, uk)]
	require.Equal(t, wok, ok, "presence of %s", m.mk(s, uk))
	if ok {
		require.Equal(t, want, string(v))
	}
}

// update folds into the value state through state.Updater, when the
// backend has it; sometimes the function fails, which must store nothing.
func (m *model) update(t *rapid.T) {
	m.needKey(t)
	u, ok := m.b.(state.Updater)
	if !ok {
		t.Skip("no Updater")
	}
	fail := rapid.Bool().Draw(t, "fail")
	add := rapid.SliceOfN(rapid.Byte(), 0, 4).Draw(t, "add")
	k := m.mk(0, nil)
	want, wok := m.data[k]
	errFail := errors.New("update failed")
	err := u.Update(m.ids[0], func(old []byte, ok bool, dst []byte) ([]byte, error) {
		require.Equal(t, wok, ok, "presence of %s", k)
		require.Equal(t, want, string(old))
		if fail {
			return nil, errFail
		}
		return append(append(dst, old...), add...), nil
	})
	if fail {
		require.ErrorIs(t, err, errFail)
		return
	}
	require.NoError(t, err)
	m.data[k] = want + string(add)
}

func (m *model) iterate(t *rapid.T) {
	m.needKey(t)
	got := map[string]string{}
	require.NoError(t, m.b.Iterate(m.ids[2], func(uk, v []byte) bool {
		got[m.mk(2, uk)] = string(v)
		return true
	}))
	prefix := m.mk(2, nil)
	want := map[string]string{}
	for k, v := range m.data {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			want[k] = v
		}
	}
	require.Equal(t, want, got)
}

func (m *model) snapshot(t *rapid.T) {
	m.next++
	h := Snap(t, m.b, m.next, m.st, "m")
	if l, ok := m.b.(state.CheckpointListener); ok && rapid.Bool().Draw(t, "complete") {
		l.NotifyCheckpointComplete(m.next)
	}
	m.snaps = append(m.snaps, modelSnap{h: h, data: maps.Clone(m.data)})
}

func (m *model) restore(t *rapid.T) {
	if len(m.snaps) == 0 {
		t.Skip("no snapshot")
	}
	s := m.snaps[rapid.IntRange(0, len(m.snaps)-1).Draw(t, "snapshot")]
	require.NoError(t, m.b.Close())
	m.b = m.newBackend(s.h)
	m.data = maps.Clone(s.data)
}

// check compares everything the backend holds, through Entries, with the
// model.
func (m *model) check(t *rapid.T) {
	got := map[string]string{}
	for s := range kinds {
		require.NoError(t, m.b.Entries(m.ids[s], func(key []byte, g int, uk, v []byte) bool {
			got[fmt.Sprintf("%d/%d/%x/%x", s, g, key, uk)] = string(v)
			return true
		}))
	}
	require.Equal(t, m.data, got)
}
