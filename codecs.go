package weir

import "github.com/weirstream/weir/codec"

// defaultCodec returns the built-in codec for T's type, or nil when T has
// none (the user then sets one with WithCodec). It runs once per stream,
// never per record.
func defaultCodec[T any]() codec.Codec[T] {
	var zero T
	var c any
	switch any(zero).(type) {
	case int64:
		c = codec.Int64()
	case int:
		c = codec.Int()
	case int32:
		c = codec.Int32()
	case uint64:
		c = codec.Uint64()
	case uint32:
		c = codec.Uint32()
	case float64:
		c = codec.Float64()
	case float32:
		c = codec.Float32()
	case bool:
		c = codec.Bool()
	case string:
		c = codec.String()
	case []byte:
		c = codec.Bytes()
	default:
		return nil
	}
	return c.(codec.Codec[T])
}
