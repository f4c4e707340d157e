package heap

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/codec"
)

// The table agrees with a Go map under random puts, replacements and
// deletions, with a good hash and with one that puts many keys on the same
// slot (long probe runs, wrap-around, backward shifts across them).
func TestTableMatchesMap(t *testing.T) {
	hashes := map[string]func(int64) uint64{
		"int64":   func(k int64) uint64 { return newCodecKeys(codec.Int64()).hash(k) },
		"fnv":     func(k int64) uint64 { return newCodecKeys[int64](int64Codec{}).hash(k) },
		"clashes": func(k int64) uint64 { return uint64(k % 3) },
	}
	for name, hash := range hashes {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var tb table[int64]
			model := map[int64]*entry{}
			for i := range 20000 {
				k := rng.Int64N(300)
				switch op := rng.IntN(10); {
				case op < 6:
					e := &entry{version: uint64(i)}
					tb.put(k, hash(k), e, hash)
					model[k] = e
				default:
					_, had := model[k]
					require.Equal(t, had, tb.del(k, hash(k), hash), "del %d", k)
					delete(model, k)
				}
				require.Equal(t, len(model), tb.n)
				if i%97 == 0 {
					for k := range int64(300) {
						require.Same(t, model[k], tb.get(k, hash(k)), "get %d after op %d", k, i)
					}
					seen := 0
					tb.all(func(k int64, e *entry) bool {
						require.Same(t, model[k], e)
						seen++
						return true
					})
					require.Equal(t, len(model), seen)
				}
			}
		})
	}
}

// A clone shares nothing the original's later writes change.
func TestTableClone(t *testing.T) {
	hash := func(k int64) uint64 { return uint64(k) * 0x9e3779b97f4a7c15 }
	var tb table[int64]
	for k := range int64(100) {
		tb.put(k, hash(k), &entry{version: uint64(k)}, hash)
	}
	c := tb.clone()
	for k := range int64(50) {
		tb.del(k, hash(k), hash)
	}
	tb.put(1000, hash(1000), &entry{}, hash)
	require.Equal(t, 100, c.n)
	for k := range int64(100) {
		require.NotNil(t, c.get(k, hash(k)), "key %d", k)
	}
	require.Nil(t, c.get(1000, hash(1000)))
}
