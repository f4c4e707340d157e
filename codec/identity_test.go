package codec_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/codec"
)

type acc struct{ sum, count int64 }

type pt32 struct{ x, y int32 }

func TestIdentities(t *testing.T) {
	for want, c := range map[string]any{
		"int64":                    codec.Int64(),
		"string":                   codec.String(),
		"pair(int64,string)":       codec.PairOf(codec.Int64(), codec.String()),
		"slice(pair(int32,bytes))": codec.Slice(codec.PairOf(codec.Int32(), codec.Bytes())),
		"struct2[codec_test.acc](int64,int64)": codec.Struct2(codec.Int64(), func(a acc) int64 { return a.sum },
			codec.Int64(), func(a acc) int64 { return a.count }, func(s, c int64) acc { return acc{s, c} }),
		"struct2[codec_test.pt32](int32,int32)": codec.Struct2(codec.Int32(), func(p pt32) int32 { return p.x },
			codec.Int32(), func(p pt32) int32 { return p.y }, func(x, y int32) pt32 { return pt32{x, y} }),
		"json[codec_test.acc]":            codec.JSON[acc](),
		"codec.FuncCodec[codec_test.acc]": codec.Func(func(b []byte, _ acc) []byte { return b }, func([]byte) (acc, error) { return acc{}, nil }),
	} {
		require.Equal(t, want, codec.IdentityOf(c).String())
	}
}

type versioned struct{ codec.Int64Codec }

func (versioned) Identity() codec.Identity { return codec.Identity{Name: "counter", Version: "2"} }

// A composite carries its components' versions.
func TestIdentityVersions(t *testing.T) {
	id := codec.IdentityOf(codec.PairOf(codec.String(), codec.Codec[int64](versioned{})))
	require.Equal(t, codec.Identity{Name: "pair(string,counter)", Version: "(,2)"}, id)
	require.Equal(t, "pair(string,counter)@(,2)", id.String())
}

// An evolved codec has its new codec's identity, reads its old codec's
// (and what that one reads), and converts old values.
func TestEvolve(t *testing.T) {
	accCodec := codec.Struct2(codec.Int64(), func(a acc) int64 { return a.sum },
		codec.Int64(), func(a acc) int64 { return a.count }, func(s, c int64) acc { return acc{s, c} })
	v2 := codec.Evolve(accCodec, codec.Int64(), func(sum int64) acc { return acc{sum: sum, count: -1} })
	require.Equal(t, codec.IdentityOf(accCodec), codec.IdentityOf(v2))
	require.True(t, v2.Reads(codec.IdentityOf(codec.Int64())))
	require.False(t, v2.Reads(codec.IdentityOf(codec.String())))
	got, err := v2.DecodeFrom(codec.IdentityOf(codec.Int64()), codec.Int64().Append(nil, 42))
	require.NoError(t, err)
	require.Equal(t, acc{42, -1}, got)
	_, err = v2.DecodeFrom(codec.IdentityOf(codec.Int64()), []byte{1})
	require.Error(t, err)

	type acc3 struct{ a acc }
	v3 := codec.Evolve[acc3, acc](codec.JSON[acc3](), v2, func(a acc) acc3 { return acc3{a} })
	require.True(t, v3.Reads(codec.IdentityOf(codec.Int64())), "through v2")
	require.True(t, v3.Reads(codec.IdentityOf(accCodec)))
	got3, err := v3.DecodeFrom(codec.IdentityOf(codec.Int64()), codec.Int64().Append(nil, 7))
	require.NoError(t, err)
	require.Equal(t, acc3{acc{7, -1}}, got3)
	var _ codec.Migrating[acc3] = v3
}
