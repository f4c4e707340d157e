package codec_test

import (
	"testing"

	"github.com/weirstream/weir/codec"
)

func reportRecords(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// benchCodec measures Append and Decode of v through the Codec interface,
// as the runtime calls them.
func benchCodec[T any](b *testing.B, c codec.Codec[T], v T) {
	enc := c.Append(nil, v)
	b.Run("Append", func(b *testing.B) {
		buf := make([]byte, 0, 256)
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		for b.Loop() {
			buf = c.Append(buf[:0], v)
		}
		reportRecords(b)
	})
	b.Run("Decode", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Decode(enc); err != nil {
				b.Fatal(err)
			}
		}
		reportRecords(b)
	})
}

func BenchmarkInt64(b *testing.B) {
	benchCodec(b, codec.Codec[int64](codec.Int64()), -123456789)
}

func BenchmarkString(b *testing.B) {
	benchCodec(b, codec.Codec[string](codec.String()), "a typical key 32 bytes long.....")
}

func BenchmarkPairInt64Int64(b *testing.B) {
	c := codec.PairOf(codec.Int64(), codec.Int64())
	benchCodec(b, codec.Codec[codec.Pair[int64, int64]](c), codec.Pair[int64, int64]{First: 7, Second: -7})
}

func BenchmarkPairStringInt64(b *testing.B) {
	c := codec.PairOf(codec.String(), codec.Int64())
	benchCodec(b, codec.Codec[codec.Pair[string, int64]](c), codec.Pair[string, int64]{First: "word", Second: 42})
}

func BenchmarkHash64(b *testing.B) {
	key := []byte("a typical key 32 bytes long.....")
	b.SetBytes(int64(len(key)))
	b.ReportAllocs()
	for b.Loop() {
		sinkHash = codec.Hash64(key)
	}
	reportRecords(b)
}
