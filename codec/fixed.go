package codec

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Int64Codec encodes an int64 as 8 big-endian bytes (two's complement).
type Int64Codec struct{}

// Int64 returns the codec for int64.
func Int64() Int64Codec { return Int64Codec{} }

// Append appends the 8 bytes of v to dst.
func (Int64Codec) Append(dst []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(v))
}

// Decode decodes exactly 8 bytes.
func (Int64Codec) Decode(src []byte) (int64, error) {
	if len(src) != 8 {
		return 0, wantLen("int64", 8, src)
	}
	return int64(binary.BigEndian.Uint64(src)), nil
}

// FixedSize returns 8.
func (Int64Codec) FixedSize() int { return 8 }

// Int32Codec encodes an int32 as 4 big-endian bytes (two's complement).
type Int32Codec struct{}

// Int32 returns the codec for int32.
func Int32() Int32Codec { return Int32Codec{} }

// Append appends the 4 bytes of v to dst.
func (Int32Codec) Append(dst []byte, v int32) []byte {
	return binary.BigEndian.AppendUint32(dst, uint32(v))
}

// Decode decodes exactly 4 bytes.
func (Int32Codec) Decode(src []byte) (int32, error) {
	if len(src) != 4 {
		return 0, wantLen("int32", 4, src)
	}
	return int32(binary.BigEndian.Uint32(src)), nil
}

// FixedSize returns 4.
func (Int32Codec) FixedSize() int { return 4 }

// IntCodec encodes an int as 8 big-endian bytes on every platform, the same
// bytes Int64Codec writes for the same number.
type IntCodec struct{}

// Int returns the codec for int.
func Int() IntCodec { return IntCodec{} }

// Append appends the 8 bytes of v to dst.
func (IntCodec) Append(dst []byte, v int) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(int64(v)))
}

// Decode decodes exactly 8 bytes. On a 32-bit platform a number that does
// not fit in an int is an error.
func (IntCodec) Decode(src []byte) (int, error) {
	if len(src) != 8 {
		return 0, wantLen("int", 8, src)
	}
	v := int64(binary.BigEndian.Uint64(src))
	if int64(int(v)) != v {
		return 0, &DecodeError{Codec: "int", Reason: fmt.Sprintf("%d overflows int", v)}
	}
	return int(v), nil
}

// FixedSize returns 8.
func (IntCodec) FixedSize() int { return 8 }

// Uint64Codec encodes a uint64 as 8 big-endian bytes.
type Uint64Codec struct{}

// Uint64 returns the codec for uint64.
func Uint64() Uint64Codec { return Uint64Codec{} }

// Append appends the 8 bytes of v to dst.
func (Uint64Codec) Append(dst []byte, v uint64) []byte {
	return binary.BigEndian.AppendUint64(dst, v)
}

// Decode decodes exactly 8 bytes.
func (Uint64Codec) Decode(src []byte) (uint64, error) {
	if len(src) != 8 {
		return 0, wantLen("uint64", 8, src)
	}
	return binary.BigEndian.Uint64(src), nil
}

// FixedSize returns 8.
func (Uint64Codec) FixedSize() int { return 8 }

// Uint32Codec encodes a uint32 as 4 big-endian bytes.
type Uint32Codec struct{}

// Uint32 returns the codec for uint32.
func Uint32() Uint32Codec { return Uint32Codec{} }

// Append appends the 4 bytes of v to dst.
func (Uint32Codec) Append(dst []byte, v uint32) []byte {
	return binary.BigEndian.AppendUint32(dst, v)
}

// Decode decodes exactly 4 bytes.
func (Uint32Codec) Decode(src []byte) (uint32, error) {
	if len(src) != 4 {
		return 0, wantLen("uint32", 4, src)
	}
	return binary.BigEndian.Uint32(src), nil
}

// FixedSize returns 4.
func (Uint32Codec) FixedSize() int { return 4 }

// Float64Codec encodes a float64 as its IEEE 754 bits in 8 big-endian
// bytes. Every bit pattern round-trips, NaN payloads and -0 included.
type Float64Codec struct{}

// Float64 returns the codec for float64.
func Float64() Float64Codec { return Float64Codec{} }

// Append appends the 8 bytes of v to dst.
func (Float64Codec) Append(dst []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(v))
}

// Decode decodes exactly 8 bytes.
func (Float64Codec) Decode(src []byte) (float64, error) {
	if len(src) != 8 {
		return 0, wantLen("float64", 8, src)
	}
	return math.Float64frombits(binary.BigEndian.Uint64(src)), nil
}

// FixedSize returns 8.
func (Float64Codec) FixedSize() int { return 8 }

// Float32Codec encodes a float32 as its IEEE 754 bits in 4 big-endian
// bytes. Every bit pattern round-trips, NaN payloads and -0 included.
type Float32Codec struct{}

// Float32 returns the codec for float32.
func Float32() Float32Codec { return Float32Codec{} }

// Append appends the 4 bytes of v to dst.
func (Float32Codec) Append(dst []byte, v float32) []byte {
	return binary.BigEndian.AppendUint32(dst, math.Float32bits(v))
}

// Decode decodes exactly 4 bytes.
func (Float32Codec) Decode(src []byte) (float32, error) {
	if len(src) != 4 {
		return 0, wantLen("float32", 4, src)
	}
	return math.Float32frombits(binary.BigEndian.Uint32(src)), nil
}

// FixedSize returns 4.
func (Float32Codec) FixedSize() int { return 4 }

// BoolCodec encodes a bool as one byte, 0 or 1.
type BoolCodec struct{}

// Bool returns the codec for bool.
func Bool() BoolCodec { return BoolCodec{} }

// Append appends 1 for true and 0 for false to dst.
func (BoolCodec) Append(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// Decode decodes exactly one byte; a byte other than 0 or 1 is an error.
func (BoolCodec) Decode(src []byte) (bool, error) {
	if len(src) != 1 {
		return false, wantLen("bool", 1, src)
	}
	switch src[0] {
	case 0:
		return false, nil
	case 1:
		return true, nil
	}
	return false, &DecodeError{Codec: "bool", Reason: fmt.Sprintf("invalid byte 0x%02x", src[0])}
}

// FixedSize returns 1.
func (BoolCodec) FixedSize() int { return 1 }

// StringCodec encodes a string as its bytes, with no length or terminator.
// Any bytes decode, valid UTF-8 or not.
type StringCodec struct{}

// String returns the codec for string.
func String() StringCodec { return StringCodec{} }

// Append appends the bytes of v to dst.
func (StringCodec) Append(dst []byte, v string) []byte { return append(dst, v...) }

// Decode returns a copy of src as a string. It never fails.
func (StringCodec) Decode(src []byte) (string, error) { return string(src), nil }

// BytesCodec encodes a byte slice as itself.
type BytesCodec struct{}

// Bytes returns the codec for []byte.
func Bytes() BytesCodec { return BytesCodec{} }

// Append appends v to dst.
func (BytesCodec) Append(dst []byte, v []byte) []byte { return append(dst, v...) }

// Decode returns a copy of src. It never fails, and the result is never nil
// (nil and empty slices both decode to an empty slice).
func (BytesCodec) Decode(src []byte) ([]byte, error) {
	b := make([]byte, len(src))
	copy(b, src)
	return b, nil
}
