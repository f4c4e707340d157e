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

// kv is the keyed benchmark job's record: two int64 fields.
type kv struct{ K, V int64 }

func BenchmarkStruct2Int64Int64(b *testing.B) {
	c := codec.Struct2(
		codec.Int64(), func(x kv) int64 { return x.K },
		codec.Int64(), func(x kv) int64 { return x.V },
		func(k, v int64) kv { return kv{k, v} })
	benchCodec(b, codec.Codec[kv](c), kv{K: 12345, V: -7})
}

func BenchmarkStruct2StringInt64(b *testing.B) {
	c := codec.Struct2(
		codec.String(), func(w WordCount) string { return w.Word },
		codec.Int64(), func(w WordCount) int64 { return w.Count },
		func(word string, count int64) WordCount { return WordCount{word, count} })
	benchCodec(b, codec.Codec[WordCount](c), WordCount{"word", 42})
}

// reading is a record of mixed fixed-size fields.
type reading struct {
	Sensor uint32
	At     int64
	Value  float64
	Valid  bool
}

func BenchmarkStruct4Fixed(b *testing.B) {
	c := codec.Struct4(
		codec.Uint32(), func(r reading) uint32 { return r.Sensor },
		codec.Int64(), func(r reading) int64 { return r.At },
		codec.Float64(), func(r reading) float64 { return r.Value },
		codec.Bool(), func(r reading) bool { return r.Valid },
		func(s uint32, at int64, v float64, ok bool) reading { return reading{s, at, v, ok} })
	benchCodec(b, codec.Codec[reading](c), reading{7, 1 << 40, 21.5, true})
}

func BenchmarkTripleInt32StringFloat32(b *testing.B) {
	type T = codec.Triple[int32, string, float32]
	c := codec.TripleOf(codec.Int32(), codec.String(), codec.Float32())
	benchCodec(b, codec.Codec[T](c), T{First: 3, Second: "sensor-3", Third: 0.5})
}

func BenchmarkSliceInt64(b *testing.B) {
	v := make([]int64, 16)
	for i := range v {
		v[i] = int64(i) * 1000
	}
	benchCodec(b, codec.Codec[[]int64](codec.Slice(codec.Int64())), v)
}
