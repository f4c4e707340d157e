package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// FuzzReadFrame feeds arbitrary bytes to a Reader of either direction, whole
// and one byte at a time. Both must decode the same frames and end with the
// same error; every decoded frame must re-encode to exactly the bytes it
// was decoded from; and errors must be a *ProtocolError, io.EOF at a frame
// boundary, or a truncation.
func FuzzReadFrame(f *testing.F) {
	for _, s := range samples() {
		f.Add(s.frame, s.dir == ClientBound)
	}
	f.Fuzz(func(t *testing.T, data []byte, clientBound bool) {
		dir := ServerBound
		if clientBound {
			dir = ClientBound
		}
		cfg := ReaderConfig{MaxFrameSize: 1 << 16, BufferSize: 16}
		r1, _ := NewReader(bytes.NewReader(data), dir, cfg)
		r2, _ := NewReader(iotest.OneByteReader(bytes.NewReader(data)), dir, cfg)
		got1, err1 := readAll(r1)
		got2, err2 := readAll(r2)
		if len(got1) != len(got2) {
			t.Fatalf("whole: %d frames (%v), byte by byte: %d frames (%v)", len(got1), err1, len(got2), err2)
		}
		off := 0
		for i := range got1 {
			if !bytes.Equal(got1[i], got2[i]) {
				t.Fatalf("frame %d differs", i)
			}
			if !bytes.HasPrefix(data[off:], got1[i]) {
				t.Fatalf("frame %d re-encodes to %x, input has %x", i, got1[i], data[off:min(len(data), off+len(got1[i]))])
			}
			off += len(got1[i])
		}
		if err1.Error() != err2.Error() {
			t.Fatalf("whole: %v, byte by byte: %v", err1, err2)
		}
		var pe *ProtocolError
		switch {
		case err1 == io.EOF:
			if off != len(data) {
				t.Fatalf("EOF at %d of %d", off, len(data))
			}
		case errors.Is(err1, io.ErrUnexpectedEOF):
			if off == len(data) {
				t.Fatalf("truncation at a frame boundary")
			}
		case errors.As(err1, &pe):
		default:
			t.Fatalf("unexpected error %v", err1)
		}
	})
}

// FuzzDecodeEvent checks that DecodeEvent never panics and that whatever it
// accepts re-encodes to the same bytes.
func FuzzDecodeEvent(f *testing.F) {
	for _, e := range sampleEvents() {
		f.Add(AppendEvent(nil, e))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		e, err := DecodeEvent(p)
		if err != nil {
			var pe *ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a *ProtocolError", err)
			}
			return
		}
		if q := AppendEvent(nil, e); !bytes.Equal(p, q) {
			t.Fatalf("decoded %+v re-encodes to %x, input %x", e, q, p)
		}
		_ = DataTypeForEvent(e)
	})
}
