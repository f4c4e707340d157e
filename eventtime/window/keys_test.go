package window

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
)

// TestWindowKeyCodec checks that a key held by value encodes as the
// serialized path writes it (record key, then the window) and decodes
// back, for 8- and 4-byte record keys, and that other lengths are errors.
func TestWindowKeyCodec(t *testing.T) {
	c64 := windowKeyCodec{size: 8, check: decodes(codec.Int64())}
	for _, w := range []Window{{Start: -5, End: 10}, {Start: math.MinInt64, End: math.MaxInt64}, GlobalWindow()} {
		k := state.ValueKey{Key: recordKeyBits(codec.Int64().Append(nil, -42))}
		if !w.global {
			k.NS, k.HasNS = [2]int64{w.Start, w.End}, true
		}
		want := appendWindow(codec.Int64().Append(nil, -42), w)
		require.Equal(t, want, c64.Append(nil, k), "window %s", w)
		got, err := c64.Decode(want)
		require.NoError(t, err)
		require.Equal(t, k, got)
	}

	c32 := windowKeyCodec{size: 4, check: decodes(codec.Uint32())}
	k := state.ValueKey{Key: 7, NS: [2]int64{1, 2}, HasNS: true}
	b := c32.Append(nil, k)
	require.Len(t, b, 4+windowLen)
	got, err := c32.Decode(b)
	require.NoError(t, err)
	require.Equal(t, k, got)

	for _, n := range []int{0, 3, 5, 8, 4 + windowLen - 1, 4 + windowLen + 1} {
		_, err := c32.Decode(make([]byte, n))
		require.Error(t, err, "%d bytes", n)
	}
}

func decodes[K any](kc codec.Codec[K]) func([]byte) error {
	return func(b []byte) error {
		_, err := kc.Decode(b)
		return err
	}
}

// TestUseKeyCodecFallsBack checks that UseKeyCodec leaves an operator with
// serialized keys when its key codec is not a built-in integer codec.
func TestUseKeyCodecFallsBack(t *testing.T) {
	op := newTestOperator(t)
	require.NoError(t, UseKeyCodec(op, codec.String()))
	require.Nil(t, op.c.keys)
	require.NoError(t, UseKeyCodec(op, codec.Int32()))
	require.NotNil(t, op.c.keys)
}

// TestUseKeyCodecRejectsForeignKeys checks that a backend holding a key
// that is not a record key of the codec (a snapshot of another job, say)
// fails UseKeyCodec with an error rather than being misread.
func TestUseKeyCodecRejectsForeignKeys(t *testing.T) {
	op := newTestOperator(t)
	b := op.c.b
	id, err := b.Register("other", state.KindValue)
	require.NoError(t, err)
	b.SetCurrentKey([]byte("abc"), 3)
	require.NoError(t, b.Put(id, nil, []byte{1}))
	err = UseKeyCodec(op, codec.Int64())
	require.ErrorContains(t, err, "do not decode")
	require.Nil(t, op.c.keys)
}

type discardOutput struct{}

func (discardOutput) Emit([]byte, Window, int64) error { return nil }
func (discardOutput) Late([]byte, int64, int64) error  { return nil }

func newTestOperator(t *testing.T) *Operator[int64, int64] {
	b, err := heap.New(heap.Config{})
	require.NoError(t, err)
	op, err := New(b, Config{Assigner: TumblingWindows(10, 0)},
		Reduce(codec.Int64(), func(a, x int64) int64 { return a + x }), Output[int64, int64](discardOutput{}))
	require.NoError(t, err)
	return op
}

// TestValueKeysSetKey checks the keyer's straight conversion of a record
// key's bytes at the integer limits: the key it holds encodes back to the
// same bytes, and distinct keys are distinct values.
func TestValueKeysSetKey(t *testing.T) {
	testValueKeysSetKey(t, codec.Int64(), 8, []int64{0, 1, -1, math.MinInt64, math.MaxInt64})
	testValueKeysSetKey(t, codec.Int(), 8, []int{0, 1, -1, math.MinInt, math.MaxInt})
	testValueKeysSetKey(t, codec.Uint64(), 8, []uint64{0, 1, math.MaxUint64})
	testValueKeysSetKey(t, codec.Int32(), 4, []int32{0, 1, -1, math.MinInt32, math.MaxInt32})
	testValueKeysSetKey(t, codec.Uint32(), 4, []uint32{0, 1, math.MaxUint32})
}

func testValueKeysSetKey[K comparable](t *testing.T, kc codec.Codec[K], size int, keys []K) {
	vk := &valueKeys{size: size}
	c := windowKeyCodec{size: size, check: decodes(kc)}
	seen := map[state.ValueKey]K{}
	for _, k := range keys {
		b := kc.Append(nil, k)
		require.True(t, vk.setKey(b), "%T %v", k, k)
		require.Equal(t, b, c.Append(nil, vk.cur), "%T %v", k, k)
		back, err := kc.Decode(c.Append(nil, vk.cur))
		require.NoError(t, err)
		require.Equal(t, k, back)
		if other, dup := seen[vk.cur]; dup {
			t.Fatalf("%T keys %v and %v held as the same value %+v", k, other, k, vk.cur)
		}
		seen[vk.cur] = k
	}
	require.False(t, vk.setKey(make([]byte, size+1)))
}

// TestUseKeyCodecOptionalInterface checks that UseKeyCodec reaches keys by
// value through state.ValueKeyBackend, not through the heap backend's
// concrete type: a backend of another type that has the method (here one
// embedding the heap backend) gets them, and one without it (the heap
// backend behind the bare KeyedBackend interface) keeps serialized keys and
// computes the same windows.
func TestUseKeyCodecOptionalInterface(t *testing.T) {
	type withValueKeys struct{ *heap.Backend }
	type withoutValueKeys struct{ state.KeyedBackend }
	results := map[bool][]string{}
	for _, byValue := range []bool{true, false} {
		hb, err := heap.New(heap.Config{})
		require.NoError(t, err)
		var b state.KeyedBackend = withoutValueKeys{hb}
		if byValue {
			b = withValueKeys{hb}
		}
		out := &collectOutput{}
		op, err := New(b, Config{Assigner: TumblingWindows(10, 0)},
			Reduce(codec.Int64(), func(a, x int64) int64 { return a + x }), Output[int64, int64](out))
		require.NoError(t, err)
		require.NoError(t, UseKeyCodec(op, codec.Int64()))
		require.Equal(t, byValue, op.c.keys != nil, "keys by value")
		for i := int64(0); i < 40; i++ {
			key := codec.Int64().Append(nil, i%3)
			require.NoError(t, op.ProcessElement(key, 0, i, i))
		}
		require.NoError(t, op.AdvanceWatermark(math.MaxInt64))
		results[byValue] = out.got
	}
	require.NotEmpty(t, results[true])
	require.Equal(t, results[false], results[true])
}

type collectOutput struct{ got []string }

func (o *collectOutput) Emit(key []byte, w Window, v int64) error {
	o.got = append(o.got, fmt.Sprintf("%x %s %d", key, w, v))
	return nil
}
func (o *collectOutput) Late([]byte, int64, int64) error { return nil }
