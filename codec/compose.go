package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// FixedSizer is implemented by a codec whose encodings all have the same
// length. Composite codecs write such a component without a length prefix.
type FixedSizer interface {
	// FixedSize returns the length in bytes of every encoding, which must
	// be positive, or -1 if the length varies. It must always return the
	// same number: the composite formats built on it depend on it.
	FixedSize() int
}

// fixedSize returns c's fixed encoding length, or -1 if it has none.
func fixedSize(c any) int {
	if f, ok := c.(FixedSizer); ok {
		if n := f.FixedSize(); n > 0 {
			return n
		}
	}
	return -1
}

// sumFixed returns the sum of fixed sizes, or -1 if any is variable.
func sumFixed(sizes ...int) int {
	sum := 0
	for _, n := range sizes {
		if n <= 0 {
			return -1
		}
		sum += n
	}
	return sum
}

// part is one component of a composite encoding: its codec, fixed size
// (-1 when variable) and which built-in codec it is, looked up once at
// construction.
type part[T any] struct {
	c       Codec[T]
	fixed   int
	builtin builtin
}

func newPart[T any](c Codec[T], ctor, which string) part[T] {
	if c == nil {
		panic("codec: " + ctor + ": nil codec for " + which)
	}
	return part[T]{c: c, fixed: fixedSize(c), builtin: builtinOf(c)}
}

// appendInner appends v as a component that is followed by others: as-is
// if its codec has a fixed size, else behind a uvarint length. Composite
// codecs try appendFast first.
func (p *part[T]) appendInner(dst []byte, v T) []byte {
	if out, ok := p.appendFast(dst, v); ok {
		return out
	}
	if s, ok := p.bytesOf(v); ok {
		if n := len(s); n < 0x80 {
			dst = append(dst, byte(n))
		} else {
			dst = binary.AppendUvarint(dst, uint64(n))
		}
		return append(dst, s...)
	}
	if p.fixed > 0 {
		return p.c.Append(dst, v)
	}
	// Reserve one byte for the length, which covers encodings shorter than
	// 128 bytes; move the encoding right if the length needs more.
	start := len(dst)
	dst = append(dst, 0)
	dst = p.c.Append(dst, v)
	n := len(dst) - start - 1
	if n < 0x80 {
		dst[start] = byte(n)
		return dst
	}
	w := uvarintLen(uint64(n))
	dst = append(dst, make([]byte, w-1)...)
	copy(dst[start+w:], dst[start+1:start+1+n])
	binary.PutUvarint(dst[start:], uint64(n))
	return dst
}

// appendLast appends v as the last component: as-is. Composite codecs try
// appendFast first.
func (p *part[T]) appendLast(dst []byte, v T) []byte {
	if out, ok := p.appendFast(dst, v); ok {
		return out
	}
	if s, ok := p.bytesOf(v); ok {
		return append(dst, s...)
	}
	return p.c.Append(dst, v)
}

// decodeInner decodes the component at the start of src written by
// appendInner and returns the bytes after it. Composite codecs try
// decodeFast first.
func (p *part[T]) decodeInner(src []byte) (T, []byte, error) {
	if v, rest, ok := p.decodeFast(src); ok {
		return v, rest, nil
	}
	var zero T
	var b []byte
	if p.fixed > 0 {
		if len(src) < p.fixed {
			return zero, nil, fmt.Errorf("need %d bytes, have %d", p.fixed, len(src))
		}
		b, src = src[:p.fixed], src[p.fixed:]
	} else {
		n, k, err := uvarint(src)
		if err != nil {
			return zero, nil, err
		}
		src = src[k:]
		if n > uint64(len(src)) {
			return zero, nil, fmt.Errorf("length %d exceeds the %d bytes left", n, len(src))
		}
		b, src = src[:n], src[n:]
	}
	if v, ok := p.decodeBytes(b); ok {
		return v, src, nil
	}
	v, err := p.c.Decode(b)
	if err != nil {
		return zero, nil, err
	}
	return v, src, nil
}

// decodeLast decodes the last component, which occupies all of src.
// Composite codecs try decodeFast first (and check that it used all of
// src).
func (p *part[T]) decodeLast(src []byte) (T, error) {
	if v, rest, ok := p.decodeFast(src); ok && len(rest) == 0 {
		return v, nil
	}
	if v, ok := p.decodeBytes(src); ok {
		return v, nil
	}
	return p.c.Decode(src)
}

func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

var (
	errPrefixTruncated  = errors.New("truncated uvarint")
	errPrefixOverflow   = errors.New("uvarint overflows 64 bits")
	errPrefixNonMinimal = errors.New("non-minimal uvarint")
)

// uvarint reads a minimal uvarint from the start of src and returns it and
// its length in bytes.
func uvarint(src []byte) (uint64, int, error) {
	x, k := binary.Uvarint(src)
	switch {
	case k == 0:
		return 0, 0, errPrefixTruncated
	case k < 0:
		return 0, 0, errPrefixOverflow
	case k > 1 && src[k-1] == 0:
		return 0, 0, errPrefixNonMinimal
	}
	return x, k, nil
}

// Pair is a value of two components.
type Pair[A, B any] struct {
	First  A
	Second B
}

// PairCodec encodes a Pair: First as a component (see the package doc),
// then Second in the remaining bytes.
type PairCodec[A, B any] struct{ *pairParts[A, B] }

// pairParts is a PairCodec's state. A composite codec is one pointer, so
// a call through the Codec interface passes it in a register instead of
// copying its parts.
type pairParts[A, B any] struct {
	a part[A]
	b part[B]
}

// PairOf returns the codec for Pair[A, B] built from a codec for each
// component. It panics if a codec is nil.
func PairOf[A, B any](a Codec[A], b Codec[B]) PairCodec[A, B] {
	return PairCodec[A, B]{&pairParts[A, B]{a: newPart(a, "PairOf", "first"), b: newPart(b, "PairOf", "second")}}
}

// Append appends the encoding of v to dst.
func (c PairCodec[A, B]) Append(dst []byte, v Pair[A, B]) []byte {
	dst, ok := c.a.appendFast(dst, v.First)
	if !ok {
		dst = c.a.appendInner(dst, v.First)
	}
	if out, ok := c.b.appendFast(dst, v.Second); ok {
		return out
	}
	return c.b.appendLast(dst, v.Second)
}

// Decode decodes a Pair that occupies all of src.
func (c PairCodec[A, B]) Decode(src []byte) (Pair[A, B], error) {
	var v Pair[A, B]
	var ok bool
	var err error
	if v.First, src, ok = c.a.decodeFast(src); !ok {
		if v.First, src, err = c.a.decodeInner(src); err != nil {
			return Pair[A, B]{}, component("pair", "first", err)
		}
	}
	if x, rest, ok := c.b.decodeFast(src); ok && len(rest) == 0 {
		v.Second = x
	} else if v.Second, err = c.b.decodeLast(src); err != nil {
		return Pair[A, B]{}, component("pair", "second", err)
	}
	return v, nil
}

// FixedSize returns the sum of the components' fixed sizes, or -1 if one
// of them varies.
func (c PairCodec[A, B]) FixedSize() int { return sumFixed(c.a.fixed, c.b.fixed) }

// Triple is a value of three components.
type Triple[A, B, C any] struct {
	First  A
	Second B
	Third  C
}

// TripleCodec encodes a Triple: First and Second as components (see the
// package doc), then Third in the remaining bytes.
type TripleCodec[A, B, C any] struct{ *tripleParts[A, B, C] }

type tripleParts[A, B, C any] struct {
	a part[A]
	b part[B]
	c part[C]
}

// TripleOf returns the codec for Triple[A, B, C] built from a codec for
// each component. It panics if a codec is nil.
func TripleOf[A, B, C any](a Codec[A], b Codec[B], c Codec[C]) TripleCodec[A, B, C] {
	return TripleCodec[A, B, C]{&tripleParts[A, B, C]{
		a: newPart(a, "TripleOf", "first"),
		b: newPart(b, "TripleOf", "second"),
		c: newPart(c, "TripleOf", "third"),
	}}
}

// Append appends the encoding of v to dst.
func (c TripleCodec[A, B, C]) Append(dst []byte, v Triple[A, B, C]) []byte {
	dst, ok := c.a.appendFast(dst, v.First)
	if !ok {
		dst = c.a.appendInner(dst, v.First)
	}
	if dst, ok = c.b.appendFast(dst, v.Second); !ok {
		dst = c.b.appendInner(dst, v.Second)
	}
	if out, ok := c.c.appendFast(dst, v.Third); ok {
		return out
	}
	return c.c.appendLast(dst, v.Third)
}

// Decode decodes a Triple that occupies all of src.
func (c TripleCodec[A, B, C]) Decode(src []byte) (Triple[A, B, C], error) {
	var v Triple[A, B, C]
	var ok bool
	var err error
	if v.First, src, ok = c.a.decodeFast(src); !ok {
		if v.First, src, err = c.a.decodeInner(src); err != nil {
			return Triple[A, B, C]{}, component("triple", "first", err)
		}
	}
	if v.Second, src, ok = c.b.decodeFast(src); !ok {
		if v.Second, src, err = c.b.decodeInner(src); err != nil {
			return Triple[A, B, C]{}, component("triple", "second", err)
		}
	}
	if x, rest, ok := c.c.decodeFast(src); ok && len(rest) == 0 {
		v.Third = x
	} else if v.Third, err = c.c.decodeLast(src); err != nil {
		return Triple[A, B, C]{}, component("triple", "third", err)
	}
	return v, nil
}

// FixedSize returns the sum of the components' fixed sizes, or -1 if one
// of them varies.
func (c TripleCodec[A, B, C]) FixedSize() int {
	return sumFixed(c.a.fixed, c.b.fixed, c.c.fixed)
}

// Struct2Codec encodes a T as two fields, laid out like a Pair.
type Struct2Codec[T, A, B any] struct{ *struct2Parts[T, A, B] }

type struct2Parts[T, A, B any] struct {
	a     part[A]
	getA  func(T) A
	b     part[B]
	getB  func(T) B
	build func(A, B) T
}

// Struct2 returns a codec for a T made of two fields: getA and getB read
// them, a and b encode them, and build makes a T from decoded fields. The
// encoding is that of PairOf(a, b). It panics if an argument is nil.
func Struct2[T, A, B any](a Codec[A], getA func(T) A, b Codec[B], getB func(T) B, build func(A, B) T) Struct2Codec[T, A, B] {
	if getA == nil || getB == nil || build == nil {
		panic("codec: Struct2: nil func")
	}
	return Struct2Codec[T, A, B]{&struct2Parts[T, A, B]{
		a: newPart(a, "Struct2", "field 1"), getA: getA,
		b: newPart(b, "Struct2", "field 2"), getB: getB,
		build: build,
	}}
}

// Append appends the encoding of v to dst.
func (c Struct2Codec[T, A, B]) Append(dst []byte, v T) []byte {
	a := c.getA(v)
	dst, ok := c.a.appendFast(dst, a)
	if !ok {
		dst = c.a.appendInner(dst, a)
	}
	b := c.getB(v)
	if out, ok := c.b.appendFast(dst, b); ok {
		return out
	}
	return c.b.appendLast(dst, b)
}

// Decode decodes a T that occupies all of src.
func (c Struct2Codec[T, A, B]) Decode(src []byte) (T, error) {
	var zero T
	var err error
	a, src, ok := c.a.decodeFast(src)
	if !ok {
		if a, src, err = c.a.decodeInner(src); err != nil {
			return zero, component("struct2", "field 1", err)
		}
	}
	b, rest, ok := c.b.decodeFast(src)
	if !ok || len(rest) != 0 {
		if b, err = c.b.decodeLast(src); err != nil {
			return zero, component("struct2", "field 2", err)
		}
	}
	return c.build(a, b), nil
}

// FixedSize returns the sum of the fields' fixed sizes, or -1 if one of
// them varies.
func (c Struct2Codec[T, A, B]) FixedSize() int { return sumFixed(c.a.fixed, c.b.fixed) }

// Struct3Codec encodes a T as three fields, laid out like a Triple.
type Struct3Codec[T, A, B, C any] struct{ *struct3Parts[T, A, B, C] }

type struct3Parts[T, A, B, C any] struct {
	a     part[A]
	getA  func(T) A
	b     part[B]
	getB  func(T) B
	c     part[C]
	getC  func(T) C
	build func(A, B, C) T
}

// Struct3 is Struct2 for a T made of three fields. The encoding is that of
// TripleOf(a, b, c).
func Struct3[T, A, B, C any](a Codec[A], getA func(T) A, b Codec[B], getB func(T) B, c Codec[C], getC func(T) C, build func(A, B, C) T) Struct3Codec[T, A, B, C] {
	if getA == nil || getB == nil || getC == nil || build == nil {
		panic("codec: Struct3: nil func")
	}
	return Struct3Codec[T, A, B, C]{&struct3Parts[T, A, B, C]{
		a: newPart(a, "Struct3", "field 1"), getA: getA,
		b: newPart(b, "Struct3", "field 2"), getB: getB,
		c: newPart(c, "Struct3", "field 3"), getC: getC,
		build: build,
	}}
}

// Append appends the encoding of v to dst.
func (c Struct3Codec[T, A, B, C]) Append(dst []byte, v T) []byte {
	a := c.getA(v)
	dst, ok := c.a.appendFast(dst, a)
	if !ok {
		dst = c.a.appendInner(dst, a)
	}
	b := c.getB(v)
	if dst, ok = c.b.appendFast(dst, b); !ok {
		dst = c.b.appendInner(dst, b)
	}
	cv := c.getC(v)
	if out, ok := c.c.appendFast(dst, cv); ok {
		return out
	}
	return c.c.appendLast(dst, cv)
}

// Decode decodes a T that occupies all of src.
func (c Struct3Codec[T, A, B, C]) Decode(src []byte) (T, error) {
	var zero T
	var err error
	a, src, ok := c.a.decodeFast(src)
	if !ok {
		if a, src, err = c.a.decodeInner(src); err != nil {
			return zero, component("struct3", "field 1", err)
		}
	}
	b, src, ok := c.b.decodeFast(src)
	if !ok {
		if b, src, err = c.b.decodeInner(src); err != nil {
			return zero, component("struct3", "field 2", err)
		}
	}
	cv, rest, ok := c.c.decodeFast(src)
	if !ok || len(rest) != 0 {
		if cv, err = c.c.decodeLast(src); err != nil {
			return zero, component("struct3", "field 3", err)
		}
	}
	return c.build(a, b, cv), nil
}

// FixedSize returns the sum of the fields' fixed sizes, or -1 if one of
// them varies.
func (c Struct3Codec[T, A, B, C]) FixedSize() int {
	return sumFixed(c.a.fixed, c.b.fixed, c.c.fixed)
}

// Struct4Codec encodes a T as four fields: the first three as components
// (see the package doc), the fourth in the remaining bytes.
type Struct4Codec[T, A, B, C, D any] struct {
	*struct4Parts[T, A, B, C, D]
}

type struct4Parts[T, A, B, C, D any] struct {
	a     part[A]
	getA  func(T) A
	b     part[B]
	getB  func(T) B
	c     part[C]
	getC  func(T) C
	d     part[D]
	getD  func(T) D
	build func(A, B, C, D) T
}

// Struct4 is Struct2 for a T made of four fields.
func Struct4[T, A, B, C, D any](a Codec[A], getA func(T) A, b Codec[B], getB func(T) B, c Codec[C], getC func(T) C, d Codec[D], getD func(T) D, build func(A, B, C, D) T) Struct4Codec[T, A, B, C, D] {
	if getA == nil || getB == nil || getC == nil || getD == nil || build == nil {
		panic("codec: Struct4: nil func")
	}
	return Struct4Codec[T, A, B, C, D]{&struct4Parts[T, A, B, C, D]{
		a: newPart(a, "Struct4", "field 1"), getA: getA,
		b: newPart(b, "Struct4", "field 2"), getB: getB,
		c: newPart(c, "Struct4", "field 3"), getC: getC,
		d: newPart(d, "Struct4", "field 4"), getD: getD,
		build: build,
	}}
}

// Append appends the encoding of v to dst.
func (c Struct4Codec[T, A, B, C, D]) Append(dst []byte, v T) []byte {
	a := c.getA(v)
	dst, ok := c.a.appendFast(dst, a)
	if !ok {
		dst = c.a.appendInner(dst, a)
	}
	b := c.getB(v)
	if dst, ok = c.b.appendFast(dst, b); !ok {
		dst = c.b.appendInner(dst, b)
	}
	cv := c.getC(v)
	if dst, ok = c.c.appendFast(dst, cv); !ok {
		dst = c.c.appendInner(dst, cv)
	}
	d := c.getD(v)
	if out, ok := c.d.appendFast(dst, d); ok {
		return out
	}
	return c.d.appendLast(dst, d)
}

// Decode decodes a T that occupies all of src.
func (c Struct4Codec[T, A, B, C, D]) Decode(src []byte) (T, error) {
	var zero T
	var err error
	a, src, ok := c.a.decodeFast(src)
	if !ok {
		if a, src, err = c.a.decodeInner(src); err != nil {
			return zero, component("struct4", "field 1", err)
		}
	}
	b, src, ok := c.b.decodeFast(src)
	if !ok {
		if b, src, err = c.b.decodeInner(src); err != nil {
			return zero, component("struct4", "field 2", err)
		}
	}
	cv, src, ok := c.c.decodeFast(src)
	if !ok {
		if cv, src, err = c.c.decodeInner(src); err != nil {
			return zero, component("struct4", "field 3", err)
		}
	}
	d, rest, ok := c.d.decodeFast(src)
	if !ok || len(rest) != 0 {
		if d, err = c.d.decodeLast(src); err != nil {
			return zero, component("struct4", "field 4", err)
		}
	}
	return c.build(a, b, cv, d), nil
}

// FixedSize returns the sum of the fields' fixed sizes, or -1 if one of
// them varies.
func (c Struct4Codec[T, A, B, C, D]) FixedSize() int {
	return sumFixed(c.a.fixed, c.b.fixed, c.c.fixed, c.d.fixed)
}

// FuncCodec is a Codec made of two functions.
type FuncCodec[T any] struct {
	append func(dst []byte, v T) []byte
	decode func(src []byte) (T, error)
}

// Func returns a codec that calls appendFn and decodeFn, which must keep
// the Codec contract (decodeFn gets exactly one value's bytes and must not
// alias them). Its errors are returned unchanged. Func panics if a
// function is nil.
func Func[T any](appendFn func(dst []byte, v T) []byte, decodeFn func(src []byte) (T, error)) FuncCodec[T] {
	if appendFn == nil || decodeFn == nil {
		panic("codec: Func: nil func")
	}
	return FuncCodec[T]{append: appendFn, decode: decodeFn}
}

// Append appends the encoding of v to dst.
func (c FuncCodec[T]) Append(dst []byte, v T) []byte { return c.append(dst, v) }

// Decode decodes a T that occupies all of src.
func (c FuncCodec[T]) Decode(src []byte) (T, error) { return c.decode(src) }

// SliceCodec encodes a []T as a uvarint element count followed by the
// elements, each as a component (see the package doc).
type SliceCodec[T any] struct{ *sliceParts[T] }

type sliceParts[T any] struct {
	elem part[T]
}

// Slice returns the codec for []T built from a codec for its elements. It
// panics if elem is nil.
func Slice[T any](elem Codec[T]) SliceCodec[T] {
	return SliceCodec[T]{&sliceParts[T]{elem: newPart(elem, "Slice", "elements")}}
}

// Append appends the encoding of v to dst. Nil and empty slices encode
// alike.
func (c SliceCodec[T]) Append(dst []byte, v []T) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	for i := range v {
		dst = c.elem.appendInner(dst, v[i])
	}
	return dst
}

// Decode decodes a slice that occupies all of src. The result is never nil.
func (c SliceCodec[T]) Decode(src []byte) ([]T, error) {
	n, k, err := uvarint(src)
	if err != nil {
		return nil, component("slice", "count", err)
	}
	src = src[k:]
	// Bound the count by the bytes left before allocating: a fixed-size
	// element takes exactly its size, any other at least its length byte.
	left := uint64(len(src))
	if f := c.elem.fixed; f > 0 {
		if n > left || n*uint64(f) != left {
			return nil, &DecodeError{Codec: "slice", Reason: fmt.Sprintf("%d elements of %d bytes, have %d bytes", n, f, left)}
		}
	} else if n > left {
		return nil, &DecodeError{Codec: "slice", Reason: fmt.Sprintf("%d elements, have only %d bytes", n, left)}
	}
	out := make([]T, n)
	for i := range out {
		if out[i], src, err = c.elem.decodeInner(src); err != nil {
			return nil, component("slice", fmt.Sprintf("element %d", i), err)
		}
	}
	if len(src) != 0 {
		return nil, &DecodeError{Codec: "slice", Reason: fmt.Sprintf("%d bytes after the last element", len(src))}
	}
	return out, nil
}
