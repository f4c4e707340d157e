package window

import (
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
	c64 := windowKeyCodec[int64]{kc: codec.Int64(), size: 8}
	for _, w := range []Window{{Start: -5, End: 10}, {Start: math.MinInt64, End: math.MaxInt64}, GlobalWindow()} {
		k := windowKey[int64]{k: -42}
		if !w.global {
			k.start, k.end, k.w = w.Start, w.End, true
		}
		want := appendWindow(codec.Int64().Append(nil, -42), w)
		require.Equal(t, want, c64.Append(nil, k), "window %s", w)
		got, err := c64.Decode(want)
		require.NoError(t, err)
		require.Equal(t, k, got)
	}

	c32 := windowKeyCodec[uint32]{kc: codec.Uint32(), size: 4}
	k := windowKey[uint32]{k: 7, start: 1, end: 2, w: true}
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

// TestTypedKeysDecode checks the keyer's straight conversion of a record
// key's bytes against the codec's Decode, at the integer limits.
func TestTypedKeysDecode(t *testing.T) {
	testTypedKeysDecode(t, codec.Int64(), 8, []int64{0, 1, -1, math.MinInt64, math.MaxInt64})
	testTypedKeysDecode(t, codec.Int(), 8, []int{0, 1, -1, math.MinInt, math.MaxInt})
	testTypedKeysDecode(t, codec.Uint64(), 8, []uint64{0, 1, math.MaxUint64})
	testTypedKeysDecode(t, codec.Int32(), 4, []int32{0, 1, -1, math.MinInt32, math.MaxInt32})
	testTypedKeysDecode(t, codec.Uint32(), 4, []uint32{0, 1, math.MaxUint32})
}

func testTypedKeysDecode[K intKey](t *testing.T, kc codec.Codec[K], size int, keys []K) {
	tk := &typedKeys[K]{c: windowKeyCodec[K]{kc: kc, size: size}}
	for _, k := range keys {
		b := kc.Append(nil, k)
		require.True(t, tk.setKey(b), "%T %v", k, k)
		require.Equal(t, k, tk.cur.k, "%T", k)
	}
	require.False(t, tk.setKey(make([]byte, size+1)))
}
