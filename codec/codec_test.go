package codec_test

import (
	"encoding/hex"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/codec"
)

// roundTrip checks that every value decodes back to itself, that Append
// appends after existing bytes, that re-encoding gives the same bytes and
// that the decoded value does not alias the source.
func roundTrip[T any](t *testing.T, c codec.Codec[T], vals ...T) {
	t.Helper()
	for _, v := range vals {
		b := c.Append([]byte("pre"), v)
		require.Equal(t, "pre", string(b[:3]), "Append overwrote dst")
		enc := b[3:]
		src := append([]byte(nil), enc...)
		got, err := c.Decode(src)
		require.NoError(t, err, "value %v", v)
		require.Equal(t, v, got)
		for i := range src {
			src[i] ^= 0xff
		}
		require.Equal(t, v, got, "decoded value aliases src")
		require.Equal(t, hex.EncodeToString(enc), hex.EncodeToString(c.Append(nil, got)), "re-encoding differs")
		if f, ok := c.(codec.FixedSizer); ok && f.FixedSize() > 0 {
			require.Len(t, enc, f.FixedSize())
		}
	}
}

type point struct {
	Name string
	X, Y int64
	Tags []string
}

func TestRoundTrip(t *testing.T) {
	t.Run("int64", func(t *testing.T) {
		roundTrip(t, codec.Codec[int64](codec.Int64()), 0, 1, -1, math.MaxInt64, math.MinInt64)
	})
	t.Run("int32", func(t *testing.T) {
		roundTrip(t, codec.Codec[int32](codec.Int32()), 0, 1, -1, math.MaxInt32, math.MinInt32)
	})
	t.Run("int", func(t *testing.T) {
		roundTrip(t, codec.Codec[int](codec.Int()), 0, 1, -1, math.MaxInt, math.MinInt)
	})
	t.Run("uint64", func(t *testing.T) {
		roundTrip(t, codec.Codec[uint64](codec.Uint64()), 0, 1, math.MaxUint64)
	})
	t.Run("uint32", func(t *testing.T) {
		roundTrip(t, codec.Codec[uint32](codec.Uint32()), 0, 1, math.MaxUint32)
	})
	t.Run("float64", func(t *testing.T) {
		roundTrip(t, codec.Codec[float64](codec.Float64()), 0, 1.5, -2.25, math.MaxFloat64,
			math.SmallestNonzeroFloat64, math.Inf(1), math.Inf(-1))
	})
	t.Run("float32", func(t *testing.T) {
		roundTrip(t, codec.Codec[float32](codec.Float32()), 0, 1.5, -2.25, math.MaxFloat32,
			math.SmallestNonzeroFloat32, float32(math.Inf(1)))
	})
	t.Run("bool", func(t *testing.T) {
		roundTrip(t, codec.Codec[bool](codec.Bool()), false, true)
	})
	t.Run("string", func(t *testing.T) {
		roundTrip(t, codec.Codec[string](codec.String()), "", "a", "héllo", "\x00\xff", strings.Repeat("x", 1000))
	})
	t.Run("bytes", func(t *testing.T) {
		roundTrip(t, codec.Codec[[]byte](codec.Bytes()), []byte{}, []byte{0}, []byte("abc"), make([]byte, 300))
	})
	t.Run("pair", func(t *testing.T) {
		type P = codec.Pair[string, int64]
		roundTrip(t, codec.Codec[P](codec.PairOf(codec.String(), codec.Int64())),
			P{}, P{"a", 1}, P{"", math.MinInt64}, P{strings.Repeat("k", 127), 2},
			P{strings.Repeat("k", 128), 3}, P{strings.Repeat("k", 20000), -4})
		type Q = codec.Pair[int64, string]
		roundTrip(t, codec.Codec[Q](codec.PairOf(codec.Int64(), codec.String())), Q{}, Q{-1, "tail"})
		type S = codec.Pair[string, string]
		roundTrip(t, codec.Codec[S](codec.PairOf(codec.String(), codec.String())), S{}, S{"", "b"}, S{"a", ""})
	})
	t.Run("nested", func(t *testing.T) {
		type In = codec.Pair[string, int64]
		type N = codec.Pair[In, codec.Pair[bool, []byte]]
		c := codec.PairOf(codec.PairOf(codec.String(), codec.Int64()), codec.PairOf(codec.Bool(), codec.Bytes()))
		roundTrip(t, codec.Codec[N](c), N{First: In{}, Second: codec.Pair[bool, []byte]{Second: []byte{}}},
			N{In{"k", 7}, codec.Pair[bool, []byte]{true, []byte("v")}},
			N{In{strings.Repeat("z", 500), -7}, codec.Pair[bool, []byte]{false, make([]byte, 200)}})
	})
	t.Run("triple", func(t *testing.T) {
		type T3 = codec.Triple[string, float64, []string]
		c := codec.TripleOf(codec.String(), codec.Float64(), codec.Slice(codec.String()))
		roundTrip(t, codec.Codec[T3](c), T3{Third: []string{}}, T3{"a", -0.5, []string{"", "b", "cc"}})
	})
	t.Run("slice", func(t *testing.T) {
		roundTrip(t, codec.Codec[[]int64](codec.Slice(codec.Int64())), []int64{}, []int64{0, -1, math.MaxInt64})
		roundTrip(t, codec.Codec[[]string](codec.Slice(codec.String())), []string{}, []string{""},
			[]string{"a", strings.Repeat("b", 300), ""})
		roundTrip(t, codec.Codec[[][]int32](codec.Slice(codec.Slice(codec.Int32()))),
			[][]int32{}, [][]int32{{}, {1}, {2, 3}})
	})
	t.Run("struct", func(t *testing.T) {
		c2 := codec.Struct2(
			codec.String(), func(p point) string { return p.Name },
			codec.Int64(), func(p point) int64 { return p.X },
			func(n string, x int64) point { return point{Name: n, X: x} })
		roundTrip(t, codec.Codec[point](c2), point{}, point{Name: "p", X: -3})
		c3 := codec.Struct3(
			codec.String(), func(p point) string { return p.Name },
			codec.Int64(), func(p point) int64 { return p.X },
			codec.Int64(), func(p point) int64 { return p.Y },
			func(n string, x, y int64) point { return point{Name: n, X: x, Y: y} })
		roundTrip(t, codec.Codec[point](c3), point{}, point{"p", 1, 2, nil})
		c4 := codec.Struct4(
			codec.String(), func(p point) string { return p.Name },
			codec.Int64(), func(p point) int64 { return p.X },
			codec.Int64(), func(p point) int64 { return p.Y },
			codec.Slice(codec.String()), func(p point) []string { return p.Tags },
			func(n string, x, y int64, tags []string) point { return point{n, x, y, tags} })
		roundTrip(t, codec.Codec[point](c4), point{Tags: []string{}}, point{"p", 1, 2, []string{"a", ""}})
	})
	t.Run("func", func(t *testing.T) {
		c := codec.Func(
			func(dst []byte, v [2]int32) []byte {
				return codec.Int32().Append(codec.Int32().Append(dst, v[0]), v[1])
			},
			func(src []byte) ([2]int32, error) {
				if len(src) != 8 {
					return [2]int32{}, errors.New("want 8 bytes")
				}
				a, _ := codec.Int32().Decode(src[:4])
				b, _ := codec.Int32().Decode(src[4:])
				return [2]int32{a, b}, nil
			})
		roundTrip(t, codec.Codec[[2]int32](c), [2]int32{}, [2]int32{-1, 1})
	})
}

func TestFloatBitsRoundTrip(t *testing.T) {
	for _, bits := range []uint64{
		0, 1 << 63, // +0, -0
		math.Float64bits(math.NaN()),
		0x7ff0000000000001, 0x7ff8dead0000beef, 0xfff8000000000001, // NaN payloads, signed NaN
		math.MaxUint64,
	} {
		c := codec.Float64()
		got, err := c.Decode(c.Append(nil, math.Float64frombits(bits)))
		require.NoError(t, err)
		require.Equal(t, bits, math.Float64bits(got), "bits %#x", bits)
	}
	for _, bits := range []uint32{0, 1 << 31, 0x7fc00000, 0x7f800001, 0xffc0beef, math.MaxUint32} {
		c := codec.Float32()
		got, err := c.Decode(c.Append(nil, math.Float32frombits(bits)))
		require.NoError(t, err)
		require.Equal(t, bits, math.Float32bits(got), "bits %#x", bits)
	}
}

// TestGolden pins the wire formats: they are stored in checkpoints.
func TestGolden(t *testing.T) {
	long := strings.Repeat("x", 200)
	longHex := strings.Repeat("78", 200)
	for _, tc := range []struct {
		name string
		enc  []byte
		want string
	}{
		{"int64 -1", codec.Int64().Append(nil, -1), "ffffffffffffffff"},
		{"int64 258", codec.Int64().Append(nil, 258), "0000000000000102"},
		{"int -2", codec.Int().Append(nil, -2), "fffffffffffffffe"},
		{"int32 1", codec.Int32().Append(nil, 1), "00000001"},
		{"uint32 max", codec.Uint32().Append(nil, math.MaxUint32), "ffffffff"},
		{"uint64 1", codec.Uint64().Append(nil, 1), "0000000000000001"},
		{"float64 1", codec.Float64().Append(nil, 1), "3ff0000000000000"},
		{"float32 -2", codec.Float32().Append(nil, -2), "c0000000"},
		{"bool", codec.Bool().Append(codec.Bool().Append(nil, true), false), "0100"},
		{"string", codec.String().Append(nil, "ab"), "6162"},
		{"bytes", codec.Bytes().Append(nil, []byte{0, 1}), "0001"},
		{"pair string int64", codec.PairOf(codec.String(), codec.Int64()).Append(nil, codec.Pair[string, int64]{"ab", 1}),
			"02" + "6162" + "0000000000000001"},
		{"pair int64 string", codec.PairOf(codec.Int64(), codec.String()).Append(nil, codec.Pair[int64, string]{1, "ab"}),
			"0000000000000001" + "6162"},
		{"pair long string", codec.PairOf(codec.String(), codec.Bool()).Append(nil, codec.Pair[string, bool]{long, true}),
			"c801" + longHex + "01"},
		{"pair of fixed pair", codec.PairOf(codec.PairOf(codec.Int32(), codec.Bool()), codec.String()).
			Append(nil, codec.Pair[codec.Pair[int32, bool], string]{codec.Pair[int32, bool]{2, true}, "z"}),
			"00000002" + "01" + "7a"},
		{"triple", codec.TripleOf(codec.String(), codec.Int32(), codec.String()).
			Append(nil, codec.Triple[string, int32, string]{"a", 3, "bc"}),
			"01" + "61" + "00000003" + "6263"},
		{"slice string", codec.Slice(codec.String()).Append(nil, []string{"a", "bc"}), "02" + "0161" + "026263"},
		{"slice int32", codec.Slice(codec.Int32()).Append(nil, []int32{1, 2}), "02" + "00000001" + "00000002"},
		{"slice nil", codec.Slice(codec.Int32()).Append(nil, nil), "00"},
	} {
		require.Equal(t, tc.want, hex.EncodeToString(tc.enc), tc.name)
	}
}

func TestFixedSize(t *testing.T) {
	for _, tc := range []struct {
		c    codec.FixedSizer
		want int
	}{
		{codec.Int64(), 8}, {codec.Int(), 8}, {codec.Uint64(), 8}, {codec.Float64(), 8},
		{codec.Int32(), 4}, {codec.Uint32(), 4}, {codec.Float32(), 4}, {codec.Bool(), 1},
		{codec.PairOf(codec.Int64(), codec.Int32()), 12},
		{codec.PairOf(codec.Int64(), codec.String()), -1},
		{codec.PairOf(codec.String(), codec.Int64()), -1},
		{codec.TripleOf(codec.Bool(), codec.Int64(), codec.PairOf(codec.Int32(), codec.Int32())), 17},
		{codec.TripleOf(codec.Bool(), codec.Bytes(), codec.Int32()), -1},
	} {
		require.Equal(t, tc.want, tc.c.FixedSize(), "%T", tc.c)
	}
	var s any = codec.String()
	_, ok := s.(codec.FixedSizer)
	require.False(t, ok, "String must not report a fixed size")
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func decodeErr[T any](c codec.Codec[T]) func([]byte) error {
	return func(b []byte) error { _, err := c.Decode(b); return err }
}

func TestDecodeErrors(t *testing.T) {
	i64 := codec.Int64()
	pairSI := codec.PairOf(codec.String(), i64)
	boom := codec.Func(func(dst []byte, v int) []byte { return dst },
		func([]byte) (int, error) { return 0, errors.New("boom") })
	s2 := codec.Struct2(codec.String(), func(p point) string { return p.Name },
		i64, func(p point) int64 { return p.X },
		func(n string, x int64) point { return point{Name: n, X: x} })
	s3 := codec.Struct3(codec.String(), func(p point) string { return p.Name },
		i64, func(p point) int64 { return p.X }, i64, func(p point) int64 { return p.Y },
		func(n string, x, y int64) point { return point{Name: n, X: x, Y: y} })
	s4 := codec.Struct4(codec.String(), func(p point) string { return p.Name },
		i64, func(p point) int64 { return p.X }, i64, func(p point) int64 { return p.Y },
		codec.Slice(codec.String()), func(p point) []string { return p.Tags },
		func(n string, x, y int64, tags []string) point { return point{n, x, y, tags} })
	one := "0000000000000001"

	for _, tc := range []struct {
		name   string
		decode func([]byte) error
		src    string // hex
		want   string
	}{
		{"int64 short", decodeErr[int64](i64), "010203", "codec: int64: want 8 bytes, got 3"},
		{"int64 long", decodeErr[int64](i64), one + "00", "codec: int64: want 8 bytes, got 9"},
		{"int64 empty", decodeErr[int64](i64), "", "codec: int64: want 8 bytes, got 0"},
		{"int", decodeErr[int](codec.Int()), "00", "codec: int: want 8 bytes, got 1"},
		{"int32", decodeErr[int32](codec.Int32()), "", "codec: int32: want 4 bytes, got 0"},
		{"uint64", decodeErr[uint64](codec.Uint64()), "00000000", "codec: uint64: want 8 bytes, got 4"},
		{"uint32", decodeErr[uint32](codec.Uint32()), one, "codec: uint32: want 4 bytes, got 8"},
		{"float64", decodeErr[float64](codec.Float64()), "00", "codec: float64: want 8 bytes, got 1"},
		{"float32", decodeErr[float32](codec.Float32()), "00", "codec: float32: want 4 bytes, got 1"},
		{"bool value", decodeErr[bool](codec.Bool()), "02", "codec: bool: invalid byte 0x02"},
		{"bool length", decodeErr[bool](codec.Bool()), "0100", "codec: bool: want 1 bytes, got 2"},
		{"pair fixed first short", decodeErr(codec.PairOf(i64, i64)), "000000",
			"codec: pair: first: need 8 bytes, have 3"},
		{"pair second short", decodeErr(codec.PairOf(i64, i64)), one + "00000000000000",
			"codec: pair: second: int64: want 8 bytes, got 7"},
		{"pair trailing", decodeErr(codec.PairOf(i64, i64)), one + one + "ff",
			"codec: pair: second: int64: want 8 bytes, got 9"},
		{"pair empty", decodeErr(pairSI), "", "codec: pair: first: truncated uvarint"},
		{"pair truncated prefix", decodeErr(pairSI), "80", "codec: pair: first: truncated uvarint"},
		{"pair length too big", decodeErr(pairSI), "0561", "codec: pair: first: length 5 exceeds the 1 bytes left"},
		{"pair non-minimal prefix", decodeErr(pairSI), "8000" + one, "codec: pair: first: non-minimal uvarint"},
		{"pair prefix overflow", decodeErr(pairSI), "ffffffffffffffffffff01" + one,
			"codec: pair: first: uvarint overflows 64 bits"},
		{"nested pair", decodeErr(codec.PairOf(pairSI, i64)), "04" + "01" + "61" + "0000" + one,
			"codec: pair: first: pair: second: int64: want 8 bytes, got 2"},
		{"func error", decodeErr(codec.PairOf(i64, boom)), one, "codec: pair: second: boom"},
		{"triple", decodeErr(codec.TripleOf(i64, codec.String(), codec.Bool())), one + "0161",
			"codec: triple: third: bool: want 1 bytes, got 0"},
		{"triple second", decodeErr(codec.TripleOf(i64, codec.String(), codec.Bool())), one + "09",
			"codec: triple: second: length 9 exceeds the 0 bytes left"},
		{"struct2", decodeErr[point](s2), "0161" + "00", "codec: struct2: field 2: int64: want 8 bytes, got 1"},
		{"struct3", decodeErr[point](s3), "0161" + "00", "codec: struct3: field 2: need 8 bytes, have 1"},
		{"struct4", decodeErr[point](s4), "00" + one + one + "0101", "codec: struct4: field 4: slice: element 0: length 1 exceeds the 0 bytes left"},
		{"slice empty", decodeErr(codec.Slice(i64)), "", "codec: slice: count: truncated uvarint"},
		{"slice fixed count", decodeErr(codec.Slice(i64)), "02" + one, "codec: slice: 2 elements of 8 bytes, have 8 bytes"},
		{"slice fixed extra", decodeErr(codec.Slice(i64)), "01" + one + "00", "codec: slice: 1 elements of 8 bytes, have 9 bytes"},
		{"slice huge count", decodeErr(codec.Slice(codec.String())), "ffffffffffffffff7f", "codec: slice: 9223372036854775807 elements, have only 0 bytes"},
		{"slice count", decodeErr(codec.Slice(codec.String())), "03" + "0161", "codec: slice: 3 elements, have only 2 bytes"},
		{"slice element", decodeErr(codec.Slice(codec.String())), "02" + "0161" + "0562", "codec: slice: element 1: length 5 exceeds the 1 bytes left"},
		{"slice trailing", decodeErr(codec.Slice(codec.String())), "01" + "0161" + "62", "codec: slice: 1 bytes after the last element"},
	} {
		err := tc.decode(mustHex(tc.src))
		require.Error(t, err, tc.name)
		require.Equal(t, tc.want, err.Error(), tc.name)
		var de *codec.DecodeError
		require.ErrorAs(t, err, &de, tc.name)
	}
}

func TestDecodeErrorUnwrap(t *testing.T) {
	sentinel := errors.New("sentinel")
	c := codec.PairOf(codec.Int64(), codec.Func(func(dst []byte, v int) []byte { return dst },
		func([]byte) (int, error) { return 0, sentinel }))
	_, err := c.Decode(make([]byte, 8))
	require.ErrorIs(t, err, sentinel)
	var de *codec.DecodeError
	require.ErrorAs(t, err, &de)
	require.Equal(t, "pair", de.Codec)
	require.Equal(t, "second", de.Reason)
}

func TestConstructorsPanicOnNil(t *testing.T) {
	require.PanicsWithValue(t, "codec: PairOf: nil codec for second", func() { codec.PairOf[int64, string](codec.Int64(), nil) })
	require.Panics(t, func() { codec.Slice[int](nil) })
	require.Panics(t, func() { codec.Func[int](nil, nil) })
	require.Panics(t, func() {
		codec.Struct2[point](codec.Int64(), nil, codec.Int64(), func(point) int64 { return 0 }, func(a, b int64) point { return point{} })
	})
}

func TestJSONRoundTrip(t *testing.T) {
	type ev struct {
		Key  string
		TS   int64
		Tags []string
	}
	c := codec.JSON[ev]()
	v := ev{"a", -5, []string{"x"}}
	got, err := c.Decode(c.Append([]byte("prefix"), v)[len("prefix"):])
	require.NoError(t, err)
	require.Equal(t, v, got)
	_, err = c.Decode([]byte("{"))
	var de *codec.DecodeError
	require.ErrorAs(t, err, &de)
}
