// Package codec defines how typed values become bytes when they cross a
// task boundary or enter keyed state.
//
// A Codec appends a value's encoding to a byte slice and decodes it back.
// Codecs are used on the per-record hot path: an implementation must not use
// reflection, and Append must not allocate when dst has room.
package codec

// Codec encodes and decodes values of type T.
type Codec[T any] interface {
	// Append appends the encoding of v to dst and returns the extended slice.
	Append(dst []byte, v T) []byte
	// Decode decodes one value that occupies all of src. It returns an error
	// if src is not a valid encoding. The returned value must not alias src
	// (src is a pooled network buffer that is reused).
	Decode(src []byte) (T, error)
}
