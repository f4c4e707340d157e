package codec_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/weirstream/weir/codec"
)

// Every Hasher agrees with Hash64 of the encoding, and HashFunc of a codec
// without one hashes the encoding.
func TestHashersAgreeWithHash64(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	check := func(name string, got, want uint64) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: Hash %x, Hash64 of the encoding %x", name, got, want)
		}
	}
	i64 := []int64{0, 1, -1, math.MinInt64, math.MaxInt64, 1023}
	for range 200 {
		i64 = append(i64, int64(r.Uint64()))
	}
	for _, v := range i64 {
		check("int64", codec.Int64().Hash(v), codec.Hash64(codec.Int64().Append(nil, v)))
		check("int", codec.Int().Hash(int(v)), codec.Hash64(codec.Int().Append(nil, int(v))))
		check("uint64", codec.Uint64().Hash(uint64(v)), codec.Hash64(codec.Uint64().Append(nil, uint64(v))))
		check("int32", codec.Int32().Hash(int32(v)), codec.Hash64(codec.Int32().Append(nil, int32(v))))
		check("uint32", codec.Uint32().Hash(uint32(v)), codec.Hash64(codec.Uint32().Append(nil, uint32(v))))
		check("HashFunc(int64)", codec.HashFunc[int64](codec.Int64())(v), codec.Hash64(codec.Int64().Append(nil, v)))
	}
	for _, s := range []string{"", "a", "user-000017", "\x00\xff"} {
		check("string", codec.String().Hash(s), codec.Hash64([]byte(s)))
	}
	f := codec.HashFunc[float64](codec.Float64())
	check("HashFunc(float64)", f(2.5), codec.Hash64(codec.Float64().Append(nil, 2.5)))
}
