package codec_test

import (
	"bytes"
	"testing"

	"github.com/weirstream/weir/codec"
)

// FuzzPairStringInt64 decodes arbitrary bytes with a (string, int64) pair
// codec, which must never panic and must re-encode whatever it accepts to
// the same bytes; and it round-trips the pair (s, n).
func FuzzPairStringInt64(f *testing.F) {
	c := codec.PairOf(codec.String(), codec.Int64())
	f.Add([]byte{}, "", int64(0))
	f.Add(c.Append(nil, codec.Pair[string, int64]{First: "key", Second: -1}), "key", int64(-1))
	f.Add([]byte{0x80, 0x01}, "\xff", int64(1)<<62)
	f.Fuzz(func(t *testing.T, data []byte, s string, n int64) {
		if v, err := c.Decode(data); err == nil {
			if out := c.Append(nil, v); !bytes.Equal(out, data) {
				t.Fatalf("decode(%x) = %+v re-encodes to %x", data, v, out)
			}
		}
		want := codec.Pair[string, int64]{First: s, Second: n}
		enc := c.Append(data[:len(data):len(data)], want)[len(data):]
		got, err := c.Decode(enc)
		if err != nil {
			t.Fatalf("decode(append(%+v)) = %v", want, err)
		}
		if got != want {
			t.Fatalf("round trip: got %+v, want %+v", got, want)
		}
	})
}
