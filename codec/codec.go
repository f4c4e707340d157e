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
