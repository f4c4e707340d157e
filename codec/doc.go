// Package codec defines how typed values become bytes when they cross a
// task boundary or enter keyed state.
//
// A Codec appends a value's encoding to a byte slice and decodes it back.
// Codecs are used on the per-record hot path: an implementation must not use
// reflection, and Append must not allocate when dst has room. Decode is given
// exactly the bytes of one value and must not keep or return memory that
// aliases them.
//
// # Built-in codecs
//
// Int64, Int32, Int, Uint64, Uint32, Float64, Float32 and Bool encode a
// value in a fixed number of big-endian bytes (Int uses 8 bytes on every
// platform; floats keep their exact IEEE 754 bits, NaN payloads included).
// String and Bytes encode a value as its raw bytes. Each constructor returns
// a concrete, zero-size codec type.
//
// # Composition
//
// PairOf, TripleOf, Struct2, Struct3 and Struct4 encode a fixed number of
// components one after another. A component other than the last is written
// as-is when its codec implements FixedSizer (its length is then known),
// and otherwise behind a uvarint length prefix. The last component takes
// the remaining bytes. Slice encodes a uvarint element count followed by the
// elements, each written like a non-last component. Func turns a pair of
// hand-written functions into a Codec.
//
// A composite codec writes and reads the components of the built-in codecs
// itself, inline, so a composite of fixed-size built-in codecs makes no call
// per component (Struct2..4 still call their field functions); other
// components are called through the Codec interface. A composite codec
// value is one pointer, cheap to pass and to call through the interface.
//
// # Strictness and stability
//
// Decode accepts exactly one encoding per value: a wrong length, a
// truncated or non-minimal length prefix, or trailing bytes are errors of
// type *DecodeError, whose message names the codec and the fault, for
// example "codec: pair: first: int64: want 8 bytes, got 3". No Decode in
// this package panics on any input.
//
// Encodings end up in checkpoints and are hashed (Hash64) to place keys in
// key groups, so the formats described here and Hash64 never change. Equal
// values encode to equal bytes, which keyed state relies on. Big-endian
// unsigned integers sort bytewise in numeric order; signed integers and
// floats do not.
package codec
