package codec_test

import (
	"bytes"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/codec"
)

// anyCodec erases a codec's type for tables of decoders.
type anyCodec struct {
	name string
	// reencode decodes src and, if that succeeds, encodes the result again.
	reencode func(src []byte) ([]byte, error)
}

func erase[T any](name string, c codec.Codec[T]) anyCodec {
	return anyCodec{name, func(src []byte) ([]byte, error) {
		v, err := c.Decode(src)
		if err != nil {
			return nil, err
		}
		return c.Append(nil, v), nil
	}}
}

func robustCodecs() []anyCodec {
	return []anyCodec{
		erase("int64", codec.Int64()),
		erase("bool", codec.Bool()),
		erase("float32", codec.Float32()),
		erase("pair string int64", codec.PairOf(codec.String(), codec.Int64())),
		erase("pair int32 bytes", codec.PairOf(codec.Int32(), codec.Bytes())),
		erase("nested", codec.PairOf(codec.PairOf(codec.String(), codec.Bool()), codec.Slice(codec.String()))),
		erase("triple", codec.TripleOf(codec.Slice(codec.Int32()), codec.String(), codec.Uint64())),
		erase("slice slice", codec.Slice(codec.Slice(codec.Bool()))),
		erase("slice pair", codec.Slice(codec.PairOf(codec.String(), codec.Int64()))),
	}
}

// TestDecodeCanonical feeds random bytes to decoders: none may panic, and
// whatever decodes must re-encode to the same bytes (one encoding per
// value, which keyed state relies on).
func TestDecodeCanonical(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range robustCodecs() {
		decoded := 0
		for range 20000 {
			src := make([]byte, rng.IntN(24))
			for i := range src {
				// Favor small bytes so length prefixes and bools are often valid.
				if rng.IntN(2) == 0 {
					src[i] = byte(rng.IntN(4))
				} else {
					src[i] = byte(rng.Uint32())
				}
			}
			out, err := c.reencode(src)
			if err != nil {
				continue
			}
			decoded++
			require.Equal(t, src, out, "%s: %x", c.name, src)
		}
		t.Logf("%s: %d of 20000 decoded", c.name, decoded)
	}
}

// TestDecodeSplit decodes every prefix and every one-byte extension of
// valid encodings: nothing may panic, and a codec whose encoding ends in a
// fixed-size part must reject them all.
func TestDecodeSplit(t *testing.T) {
	type P = codec.Pair[string, int64]
	pc := codec.PairOf(codec.String(), codec.Int64())
	sc := codec.Slice(codec.PairOf(codec.String(), codec.Int64()))
	encs := [][]byte{
		pc.Append(nil, P{}),
		pc.Append(nil, P{"key", -1}),
		pc.Append(nil, P{strings.Repeat("k", 300), 5}),
		sc.Append(nil, []P{{"a", 1}, {strings.Repeat("b", 200), 2}}),
	}
	strict := []func([]byte) error{decodeErr(pc), decodeErr(pc), decodeErr(pc), decodeErr(sc)}
	for i, enc := range encs {
		require.NoError(t, strict[i](enc))
		for n := range len(enc) {
			require.Error(t, strict[i](enc[:n]), "prefix %d of %x", n, enc)
		}
		for _, b := range []byte{0, 1, 0x80, 0xff} {
			require.Error(t, strict[i](append(bytes.Clone(enc), b)), "extended %x", enc)
		}
		for _, c := range robustCodecs() {
			for n := range len(enc) + 1 {
				_, _ = c.reencode(enc[:n])
			}
		}
	}
}

// TestHash64 checks Hash64 against the standard library's FNV-1a.
func TestHash64(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 2000 {
		b := make([]byte, i%70)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		h := fnv.New64a()
		h.Write(b)
		require.Equal(t, h.Sum64(), codec.Hash64(b), "%x", b)
	}
	require.Equal(t, uint64(0xcbf29ce484222325), codec.Hash64(nil))
}
