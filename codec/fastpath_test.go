package codec_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/weirstream/weir/codec"
)

// Composite codecs write and read built-in components themselves instead
// of calling their codecs. These tests compare them with the same
// composites over opaque wrappers of the same codecs, which they cannot
// recognise and so call through the Codec interface as they always did:
// the bytes, the decoded values and the errors must be the same.

// opaque hides which codec it wraps; it keeps the wrapped codec's fixed
// size, on which the layout depends.
type opaque[T any] struct{ c codec.Codec[T] }

func (o opaque[T]) Append(dst []byte, v T) []byte { return o.c.Append(dst, v) }
func (o opaque[T]) Decode(src []byte) (T, error)  { return o.c.Decode(src) }

type opaqueFixed[T any] struct {
	opaque[T]
	n int
}

func (o opaqueFixed[T]) FixedSize() int { return o.n }

func hide[T any](c codec.Codec[T]) codec.Codec[T] {
	if f, ok := c.(codec.FixedSizer); ok && f.FixedSize() > 0 {
		return opaqueFixed[T]{opaque[T]{c}, f.FixedSize()}
	}
	return opaque[T]{c}
}

// comp is a component codec and a generator of its values.
type comp[T any] struct {
	name string
	c    codec.Codec[T]
	gen  func(r *rand.Rand) T
}

func genBits(r *rand.Rand) uint64 {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return math.MaxUint64
	case 2:
		return 1 << 63
	}
	return r.Uint64() >> r.IntN(64)
}

func genBytes(r *rand.Rand) []byte {
	n := r.IntN(4)
	switch n {
	case 0:
		return nil
	case 1:
		return []byte{}
	case 2:
		n = 100 + r.IntN(100) // around the 128-byte length-prefix boundary
	default:
		n = r.IntN(20)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

var (
	cInt64   = comp[int64]{"int64", codec.Int64(), func(r *rand.Rand) int64 { return int64(genBits(r)) }}
	cInt     = comp[int]{"int", codec.Int(), func(r *rand.Rand) int { return int(genBits(r)) }}
	cUint64  = comp[uint64]{"uint64", codec.Uint64(), genBits}
	cFloat64 = comp[float64]{"float64", codec.Float64(), func(r *rand.Rand) float64 { return math.Float64frombits(genBits(r)) }}
	cInt32   = comp[int32]{"int32", codec.Int32(), func(r *rand.Rand) int32 { return int32(genBits(r)) }}
	cUint32  = comp[uint32]{"uint32", codec.Uint32(), func(r *rand.Rand) uint32 { return uint32(genBits(r)) }}
	cFloat32 = comp[float32]{"float32", codec.Float32(), func(r *rand.Rand) float32 { return math.Float32frombits(uint32(genBits(r))) }}
	cBool    = comp[bool]{"bool", codec.Bool(), func(r *rand.Rand) bool { return r.IntN(2) == 0 }}
	cString  = comp[string]{"string", codec.String(), func(r *rand.Rand) string { return string(genBytes(r)) }}
	cBytes   = comp[[]byte]{"bytes", codec.Bytes(), genBytes}
	cPair    = comp[codec.Pair[int32, string]]{"pair", codec.PairOf(codec.Int32(), codec.String()),
		func(r *rand.Rand) codec.Pair[int32, string] {
			return codec.Pair[int32, string]{First: int32(r.Uint32()), Second: string(genBytes(r))}
		}}
)

// sameCodec checks that fast and slow, two codecs of the same format,
// encode every value alike and agree on decoding its encoding, every
// prefix of it, it with a byte more and it with a byte changed.
func sameCodec[T any](t *testing.T, name string, fast, slow codec.Codec[T], vals []T, r *rand.Rand) {
	t.Helper()
	for _, v := range vals {
		enc := fast.Append([]byte("pre"), v)[3:]
		if want := slow.Append([]byte("pre"), v)[3:]; !bytes.Equal(enc, want) {
			t.Fatalf("%s: Append(%v) = %x, want %x", name, v, enc, want)
		}
		inputs := [][]byte{enc, append(append([]byte(nil), enc...), byte(r.Uint32()))}
		for i := range enc {
			inputs = append(inputs, enc[:i])
			flip := append([]byte(nil), enc...)
			flip[i] ^= byte(1 + r.IntN(255))
			inputs = append(inputs, flip)
		}
		for _, in := range inputs {
			got, gotErr := fast.Decode(in)
			want, wantErr := slow.Decode(in)
			if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
				t.Fatalf("%s: Decode(%x): error %v, want %v", name, in, gotErr, wantErr)
			}
			if gotErr == nil && !bytes.Equal(slow.Append(nil, got), slow.Append(nil, want)) {
				t.Fatalf("%s: Decode(%x) = %v, want %v", name, in, got, want)
			}
		}
	}
}

// quad is a record of four fields for Struct4.
type quad[A, B, C, D any] struct {
	A A
	B B
	C C
	D D
}

const valuesPerCase = 30

func checkTwo[A, B any](t *testing.T, a comp[A], b comp[B], r *rand.Rand) {
	name := a.name + "," + b.name
	type P = codec.Pair[A, B]
	vals := make([]P, valuesPerCase)
	for i := range vals {
		vals[i] = P{First: a.gen(r), Second: b.gen(r)}
	}
	slowPair := codec.PairOf(hide(a.c), hide(b.c))
	sameCodec[P](t, "pair "+name, codec.PairOf(a.c, b.c), slowPair, vals, r)
	getFirst, getSecond := func(p P) A { return p.First }, func(p P) B { return p.Second }
	build2 := func(x A, y B) P { return P{x, y} }
	sameCodec[P](t, "struct2 "+name, codec.Struct2(a.c, getFirst, b.c, getSecond, build2),
		codec.Struct2(hide(a.c), getFirst, hide(b.c), getSecond, build2), vals, r)

	type T3 = codec.Triple[A, B, A]
	vals3 := make([]T3, valuesPerCase)
	for i := range vals3 {
		vals3[i] = T3{First: a.gen(r), Second: b.gen(r), Third: a.gen(r)}
	}
	slowTriple := codec.TripleOf(hide(a.c), hide(b.c), hide(a.c))
	sameCodec[T3](t, "triple "+name, codec.TripleOf(a.c, b.c, a.c), slowTriple, vals3, r)
	get1, get2, get3 := func(p T3) A { return p.First }, func(p T3) B { return p.Second }, func(p T3) A { return p.Third }
	build3 := func(x A, y B, z A) T3 { return T3{x, y, z} }
	sameCodec[T3](t, "struct3 "+name, codec.Struct3(a.c, get1, b.c, get2, a.c, get3, build3),
		codec.Struct3(hide(a.c), get1, hide(b.c), get2, hide(a.c), get3, build3), vals3, r)

	type Q = quad[B, A, A, B]
	vals4 := make([]Q, valuesPerCase)
	for i := range vals4 {
		vals4[i] = Q{b.gen(r), a.gen(r), a.gen(r), b.gen(r)}
	}
	build := func(w B, x, y A, z B) Q { return Q{w, x, y, z} }
	getA, getB := func(q Q) B { return q.A }, func(q Q) A { return q.B }
	getC, getD := func(q Q) A { return q.C }, func(q Q) B { return q.D }
	sameCodec[Q](t, "struct4 "+name,
		codec.Struct4(b.c, getA, a.c, getB, a.c, getC, b.c, getD, build),
		codec.Struct4(hide(b.c), getA, hide(a.c), getB, hide(a.c), getC, hide(b.c), getD, build), vals4, r)
}

// checkWithEach checks a with a component of each size class, variable
// and composite; checkTwo puts each of a and b both before others and
// last.
func checkWithEach[A any](t *testing.T, a comp[A], r *rand.Rand) {
	checkTwo(t, a, cInt64, r)
	checkTwo(t, a, cFloat32, r)
	checkTwo(t, a, cBool, r)
	checkTwo(t, a, cString, r)
	checkTwo(t, a, cBytes, r)
	checkTwo(t, a, cPair, r)

	vals := make([][]A, valuesPerCase)
	for i := range vals {
		vals[i] = make([]A, r.IntN(5))
		for j := range vals[i] {
			vals[i][j] = a.gen(r)
		}
	}
	sameCodec[[]A](t, "slice "+a.name, codec.Slice(a.c), codec.Slice(hide(a.c)), vals, r)
}

// TestCompositeFastPathsEncodeAsBefore covers every built-in component
// codec (and a composite one) in every position of every composite codec,
// next to one of each kind.
func TestCompositeFastPathsEncodeAsBefore(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	checkWithEach(t, cInt64, r)
	checkWithEach(t, cInt, r)
	checkWithEach(t, cUint64, r)
	checkWithEach(t, cFloat64, r)
	checkWithEach(t, cInt32, r)
	checkWithEach(t, cUint32, r)
	checkWithEach(t, cFloat32, r)
	checkWithEach(t, cBool, r)
	checkWithEach(t, cString, r)
	checkWithEach(t, cBytes, r)
	checkWithEach(t, cPair, r)
}
