package codec_test

import (
	"strings"
	"testing"

	"github.com/weirstream/weir/codec"
)

var (
	sinkI64  int64
	sinkPair codec.Pair[int64, int64]
	sinkErr  error
	sinkHash uint64
)

// requireNoAllocs fails if f allocates. Codecs are called through the
// Codec interface, as the runtime calls them.
func requireNoAllocs(t *testing.T, name string, f func()) {
	t.Helper()
	if n := testing.AllocsPerRun(200, f); n != 0 {
		t.Errorf("%s: %v allocations per run, want 0", name, n)
	}
}

func TestNoAllocs(t *testing.T) {
	buf := make([]byte, 0, 1024)
	var (
		i64  codec.Codec[int64]                     = codec.Int64()
		i32  codec.Codec[int32]                     = codec.Int32()
		in   codec.Codec[int]                       = codec.Int()
		u64  codec.Codec[uint64]                    = codec.Uint64()
		u32  codec.Codec[uint32]                    = codec.Uint32()
		f64  codec.Codec[float64]                   = codec.Float64()
		f32  codec.Codec[float32]                   = codec.Float32()
		bl   codec.Codec[bool]                      = codec.Bool()
		str  codec.Codec[string]                    = codec.String()
		byt  codec.Codec[[]byte]                    = codec.Bytes()
		pii  codec.Codec[codec.Pair[int64, int64]]  = codec.PairOf(codec.Int64(), codec.Int64())
		psi  codec.Codec[codec.Pair[string, int64]] = codec.PairOf(codec.String(), codec.Int64())
		sl   codec.Codec[[]string]                  = codec.Slice(codec.String())
		long                                        = strings.Repeat("x", 300)
	)
	enc8 := make([]byte, 8)
	enc4 := make([]byte, 4)
	enc16 := make([]byte, 16)

	requireNoAllocs(t, "int64 append", func() { buf = i64.Append(buf[:0], -5) })
	requireNoAllocs(t, "int64 decode", func() { sinkI64, sinkErr = i64.Decode(enc8) })
	requireNoAllocs(t, "int32 append", func() { buf = i32.Append(buf[:0], -5) })
	requireNoAllocs(t, "int32 decode", func() { v, err := i32.Decode(enc4); sinkI64, sinkErr = int64(v), err })
	requireNoAllocs(t, "int append", func() { buf = in.Append(buf[:0], -5) })
	requireNoAllocs(t, "int decode", func() { v, err := in.Decode(enc8); sinkI64, sinkErr = int64(v), err })
	requireNoAllocs(t, "uint64 append", func() { buf = u64.Append(buf[:0], 5) })
	requireNoAllocs(t, "uint64 decode", func() { v, err := u64.Decode(enc8); sinkI64, sinkErr = int64(v), err })
	requireNoAllocs(t, "uint32 append", func() { buf = u32.Append(buf[:0], 5) })
	requireNoAllocs(t, "uint32 decode", func() { v, err := u32.Decode(enc4); sinkI64, sinkErr = int64(v), err })
	requireNoAllocs(t, "float64 append", func() { buf = f64.Append(buf[:0], 1.5) })
	requireNoAllocs(t, "float64 decode", func() { v, err := f64.Decode(enc8); sinkI64, sinkErr = int64(v), err })
	requireNoAllocs(t, "float32 append", func() { buf = f32.Append(buf[:0], 1.5) })
	requireNoAllocs(t, "float32 decode", func() { v, err := f32.Decode(enc4); sinkI64, sinkErr = int64(v), err })
	requireNoAllocs(t, "bool append", func() { buf = bl.Append(buf[:0], true) })
	requireNoAllocs(t, "bool decode", func() { _, sinkErr = bl.Decode(enc8[:1]) })
	requireNoAllocs(t, "string append", func() { buf = str.Append(buf[:0], long) })
	requireNoAllocs(t, "bytes append", func() { buf = byt.Append(buf[:0], enc16) })
	requireNoAllocs(t, "pair int64 int64 append", func() { buf = pii.Append(buf[:0], codec.Pair[int64, int64]{1, 2}) })
	requireNoAllocs(t, "pair int64 int64 decode", func() { sinkPair, sinkErr = pii.Decode(enc16) })
	requireNoAllocs(t, "pair string int64 append", func() { buf = psi.Append(buf[:0], codec.Pair[string, int64]{"key", 2}) })
	requireNoAllocs(t, "pair long string append", func() { buf = psi.Append(buf[:0], codec.Pair[string, int64]{long, 2}) })
	requireNoAllocs(t, "slice append", func() { buf = sl.Append(buf[:0], []string{"a", long}) })
	requireNoAllocs(t, "hash64", func() { sinkHash = codec.Hash64(enc16) })

	type rec struct{ K, V int64 }
	var (
		s2 codec.Codec[rec] = codec.Struct2(
			codec.Int64(), func(r rec) int64 { return r.K },
			codec.Int64(), func(r rec) int64 { return r.V },
			func(k, v int64) rec { return rec{k, v} })
		tri codec.Codec[codec.Triple[int32, bool, float64]] = codec.TripleOf(codec.Int32(), codec.Bool(), codec.Float64())
		sli codec.Codec[[]int64]                            = codec.Slice(codec.Int64())
		st  codec.Triple[int32, bool, float64]
	)
	enc13 := tri.Append(nil, codec.Triple[int32, bool, float64]{First: 1, Second: true, Third: 2})
	requireNoAllocs(t, "struct2 int64 int64 append", func() { buf = s2.Append(buf[:0], rec{1, 2}) })
	requireNoAllocs(t, "struct2 int64 int64 decode", func() { r, err := s2.Decode(enc16); sinkI64, sinkErr = r.V, err })
	requireNoAllocs(t, "triple int32 bool float64 append", func() { buf = tri.Append(buf[:0], st) })
	requireNoAllocs(t, "triple int32 bool float64 decode", func() { v, err := tri.Decode(enc13); sinkI64, sinkErr = int64(v.First), err })
	ints := []int64{1, 2}
	requireNoAllocs(t, "slice int64 append", func() { buf = sli.Append(buf[:0], ints) })
}
