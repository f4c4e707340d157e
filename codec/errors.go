package codec

import (
	"fmt"
	"strings"
)

// DecodeError reports bytes that a codec could not decode.
//
// Its message is "codec: " followed by the path to the fault, for example
// "codec: pair: first: int64: want 8 bytes, got 3".
type DecodeError struct {
	// Codec names the codec that failed: "int64", "pair", "slice", ...
	Codec string
	// Reason says what was wrong, or which component failed when Err is set.
	Reason string
	// Err is the error of a component's codec, if the fault lies there.
	Err error
}

func (e *DecodeError) Error() string {
	var b strings.Builder
	b.WriteString("codec: ")
	e.write(&b)
	return b.String()
}

func (e *DecodeError) write(b *strings.Builder) {
	b.WriteString(e.Codec)
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	if e.Err == nil {
		return
	}
	b.WriteString(": ")
	if inner, ok := e.Err.(*DecodeError); ok {
		inner.write(b)
		return
	}
	b.WriteString(e.Err.Error())
}

// Unwrap returns the component codec's error, if any.
func (e *DecodeError) Unwrap() error { return e.Err }

func wantLen(name string, want int, src []byte) error {
	return &DecodeError{Codec: name, Reason: fmt.Sprintf("want %d bytes, got %d", want, len(src))}
}

// component wraps err, returned while decoding component which of a
// composite codec name.
func component(name, which string, err error) error {
	return &DecodeError{Codec: name, Reason: which, Err: err}
}
