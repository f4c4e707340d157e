package pebble

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSlotIndex adds and removes random keys, many more than the table
// holds at once, and checks every key against a map after each step: a
// removal that shifted an entry back wrongly (out of its run, or past its
// home) leaves a key that find no longer reaches, or finds where it is
// gone. Small tables wrap around and collide on homes constantly.
func TestSlotIndex(t *testing.T) {
	for _, live := range []int{1, 7, 100, 3000} {
		r := rand.New(rand.NewPCG(uint64(live), 3))
		x := newSlotIndex()
		var slots []centry
		var free []int32
		model := map[string]int32{}
		keys := make([]string, 4*live+4)
		for i := range keys {
			keys[i] = "k" + strconv.Itoa(i)
		}
		for step := range 20 * len(keys) {
			k := keys[r.IntN(len(keys))]
			if i, ok := model[k]; ok {
				x.remove(slots[i].tag, i)
				slots[i] = centry{}
				free = append(free, i)
				delete(model, k)
			} else if len(model) < live {
				var i int32
				if n := len(free); n > 0 {
					i, free = free[n-1], free[:n-1]
				} else {
					slots = append(slots, centry{})
					i = int32(len(slots) - 1)
				}
				slots[i] = centry{key: k, used: true}
				slots[i].tag = x.add(k, i)
				model[k] = i
			}
			if len(model) != x.n || 2*x.n > len(x.tab) {
				t.Fatalf("live %d step %d: %d keys, index %d in %d", live, step, len(model), x.n, len(x.tab))
			}
			if step%(live/8+1) != 0 {
				continue
			}
			for _, k := range keys {
				want, ok := model[k]
				if !ok {
					want = -1
				}
				if got := x.find(k, slots); got != want {
					t.Fatalf("live %d step %d: key %s found at %d, want %d", live, step, k, got, want)
				}
			}
		}
		x.reset()
		require.Equal(t, int32(-1), x.find(keys[0], slots))
	}
}

// BenchmarkCacheChurn is the cache's own work for a keyed update that
// misses, without pebble: a lookup that misses, a check and an insert (as
// a prefetch makes them), the record's lookup, and the eviction of a
// clean victim, over a cache of 100,000 entries among a million keys.
func BenchmarkCacheChurn(b *testing.B) {
	const entries, keys = 100_000, 1 << 20
	ks := make([][]byte, keys)
	for i := range ks {
		ks[i] = []byte("\x00\x01\x00\x00\x00\x01" + strconv.Itoa(i*7919))
	}
	c := newCache(entries*(entryOverhead+24), 1<<62)
	val := make([]byte, 8)
	noWrite := func(string, []byte, bool) error { return nil }
	r := rand.New(rand.NewPCG(1, 2))
	b.ResetTimer()
	for range b.N {
		k := ks[r.IntN(keys)]
		if c.holds(k) {
			c.lookup(k)
			continue
		}
		i := c.insert(k, val, true, false)
		if c.lookup(k) != i {
			b.Fatal("inserted key not found")
		}
		if c.overLimit() {
			if err := c.evict(i, noWrite); err != nil {
				b.Fatal(err)
			}
		}
	}
}
