package pebble

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// sortKeys orders keys as bytes.Compare does, at sizes on both sides of
// radixMin, for keys that share most bytes (as a backend's do), keys
// shorter than the prefix (zero-padded: "a" and "a\x00" tie there) and
// keys longer than it that differ only after it, and keys that differ
// in any of its bytes.
func TestSortKeys(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	gens := map[string]func() []byte{
		"backend-like": func() []byte {
			k := []byte{0, byte(r.IntN(4)), 0, 0, 0, 7, 8}
			return append(k, byte(r.IntN(256)), byte(r.IntN(3)), 0, 0, 0, 0, 0, byte(r.IntN(256)))
		},
		"every-byte": func() []byte { // 16 bytes, each of two values
			k := make([]byte, 16)
			for i := range k {
				k[i] = byte(r.IntN(2)) * 0x81
			}
			return k
		},
		"short-and-long": func() []byte {
			k := make([]byte, r.IntN(24))
			for i := range k {
				k[i] = []byte{0, 1, 0xFF}[r.IntN(3)]
			}
			return k
		},
	}
	var tmp []sortKey
	for name, gen := range gens {
		for _, n := range []int{0, 1, 2, radixMin - 1, radixMin, radixMin + 1, 1000, 5000} {
			keys := make([][]byte, n)
			ks := make([]sortKey, n)
			for i := range keys {
				keys[i] = gen()
				ks[i] = newSortKey(keys[i], int32(i))
			}
			tmp = sortKeys(ks, tmp, func(a, b int32) int { return bytes.Compare(keys[a], keys[b]) })
			got := make([][]byte, n)
			seen := make([]bool, n)
			for i, k := range ks {
				got[i] = keys[k.slot]
				if seen[k.slot] {
					t.Fatalf("%s, %d keys: item %d twice", name, n, k.slot)
				}
				seen[k.slot] = true
			}
			if !slices.IsSortedFunc(got, bytes.Compare) {
				t.Fatalf("%s, %d keys: not sorted", name, n)
			}
		}
	}
}
