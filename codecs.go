package weir

import (
	"fmt"
	"reflect"

	"github.com/weirstream/weir/codec"
)

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

// typeName is T's name as errors show it (package.Type).
func typeName[T any]() string { return reflect.TypeFor[T]().String() }

// noCodec is the error of an operator whose values of type T need a codec
// and have none: what names the operator, why says what needs the codec
// and fix the call that gives it one.
func noCodec[T any](what, why, fix string) error {
	t := typeName[T]()
	return fmt.Errorf("weir: %s: %s, but their type %s has no codec: %s, with a codec.Codec[%s] "+
		"(codec.Struct2, Struct3 or Struct4 for a struct; codec.JSON[%s]() for any type)", what, why, t, fix, t, t)
}
