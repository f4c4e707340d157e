package codec

import "encoding/json"

// JSONCodec encodes values with encoding/json.
type JSONCodec[T any] struct{}

// JSON returns a codec that encodes any value encoding/json can round-trip
// (exported struct fields, maps, slices, …). It is the convenient choice
// for prototypes and small streams; it allocates per value and is several
// times slower than the composed codecs (Struct2, PairOf, …), so prefer
// those on hot exchanges.
func JSON[T any]() JSONCodec[T] { return JSONCodec[T]{} }

// Append implements Codec. A value encoding/json cannot encode (a channel,
// a function, a cyclic structure) is a programming error: it panics.
func (JSONCodec[T]) Append(dst []byte, v T) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("codec: JSON: " + err.Error())
	}
	return append(dst, b...)
}

// Decode implements Codec.
func (JSONCodec[T]) Decode(src []byte) (T, error) {
	var v T
	if err := json.Unmarshal(src, &v); err != nil {
		return v, &DecodeError{Codec: "json", Err: err}
	}
	return v, nil
}
