package codec

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// builtin names a built-in codec whose encoding a composite codec writes
// and reads itself, inline, instead of calling the component's codec
// through the Codec interface once per component. The bytes are exactly
// the built-in codec's; anything but a well-formed encoding goes to the
// codec itself, so errors do not change either.
type builtin uint8

const (
	notBuiltin builtin = iota
	// builtin8 is a codec writing the 8 bytes of a value's memory
	// representation big-endian: Int64, Uint64, Float64 (math.Float64bits
	// is that representation) and, where int has 64 bits, Int.
	builtin8
	// builtin4 is the same for 4 bytes: Int32, Uint32, Float32.
	builtin4
	// builtinBool is Bool: one byte, 0 or 1.
	builtinBool
	// builtinString is String: the string's bytes.
	builtinString
	// builtinBytes is Bytes: the slice's bytes.
	builtinBytes
)

// builtinOf returns which built-in codec c is, if any.
func builtinOf(c any) builtin {
	switch c.(type) {
	case Int64Codec, Uint64Codec, Float64Codec:
		return builtin8
	case IntCodec:
		if bits.UintSize == 64 {
			return builtin8
		}
	case Int32Codec, Uint32Codec, Float32Codec:
		return builtin4
	case BoolCodec:
		return builtinBool
	case StringCodec:
		return builtinString
	case BytesCodec:
		return builtinBytes
	}
	return notBuiltin
}

// The unsafe conversions below are sound because a part's builtin is set
// only when its codec is one of the codecs named, each of which is a
// Codec[T] for exactly one T of the size read or written.

// appendFast appends v's encoding and reports true if p's codec is a
// built-in fixed-size codec; otherwise it returns dst and false. It is
// small enough to be inlined into every composite codec, which call it
// before appendInner or appendLast.
func (p *part[T]) appendFast(dst []byte, v T) ([]byte, bool) {
	switch p.builtin {
	case builtin8:
		return binary.BigEndian.AppendUint64(dst, *(*uint64)(unsafe.Pointer(&v))), true
	case builtin4:
		return binary.BigEndian.AppendUint32(dst, *(*uint32)(unsafe.Pointer(&v))), true
	case builtinBool:
		return append(dst, *(*byte)(unsafe.Pointer(&v))), true
	}
	return dst, false
}

// decodeFast decodes a value of a built-in fixed-size codec from the start
// of src and returns the bytes after it, reporting false (having decoded
// nothing) if p's codec is not such a codec or src does not start with a
// valid encoding. Like appendFast it is inlined into composite codecs,
// which call decodeInner or decodeLast when it reports false.
func (p *part[T]) decodeFast(src []byte) (v T, rest []byte, ok bool) {
	switch p.builtin {
	case builtin8:
		if len(src) >= 8 {
			*(*uint64)(unsafe.Pointer(&v)) = binary.BigEndian.Uint64(src)
			return v, src[8:], true
		}
	case builtin4:
		if len(src) >= 4 {
			*(*uint32)(unsafe.Pointer(&v)) = binary.BigEndian.Uint32(src)
			return v, src[4:], true
		}
	case builtinBool:
		if len(src) >= 1 && src[0] <= 1 {
			*(*byte)(unsafe.Pointer(&v)) = src[0]
			return v, src[1:], true
		}
	}
	return v, src, false
}

// bytesOf returns v's encoding by p's codec and true if that codec is
// String or Bytes, whose encoding is v's bytes (as a string, not copied).
func (p *part[T]) bytesOf(v T) (string, bool) {
	switch p.builtin {
	case builtinString:
		return *(*string)(unsafe.Pointer(&v)), true
	case builtinBytes:
		b := *(*[]byte)(unsafe.Pointer(&v))
		return unsafe.String(unsafe.SliceData(b), len(b)), true
	}
	return "", false
}

// decodeBytes decodes src, all of which is a value's encoding, and reports
// true if p's codec is String or Bytes, which never fail.
func (p *part[T]) decodeBytes(src []byte) (v T, ok bool) {
	switch p.builtin {
	case builtinString:
		*(*string)(unsafe.Pointer(&v)) = string(src)
		return v, true
	case builtinBytes:
		b := make([]byte, len(src)) // never nil, as BytesCodec.Decode
		copy(b, src)
		*(*[]byte)(unsafe.Pointer(&v)) = b
		return v, true
	}
	return v, false
}
