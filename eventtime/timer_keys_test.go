package eventtime

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// Inserts and removals keep every key findable, with hashes chosen so
// that probe sequences collide, cluster and wrap around the end of the
// slots.
func TestTimerKeyTableAgainstMap(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 5))
		var tab timerKeyTable
		in := map[string]*timerKey{}
		hash := func(key []byte) uint64 {
			if seed%2 == 0 {
				return uint64(len(key)) * 0x9e3779b97f4a7c15 // few distinct hashes
			}
			return uint64(key[len(key)-1]%8) + 12 // clusters that wrap around the end of 16 slots
		}
		hashes := map[string]uint64{}
		for step := range 2000 {
			key := []byte(fmt.Sprint("k", rng.IntN(60+int(seed)*10)))
			if _, ok := hashes[string(key)]; !ok {
				hashes[string(key)] = hash(key)
			}
			h := hashes[string(key)]
			if k := in[string(key)]; k != nil {
				require.Same(t, k, tab.find(h, key), "step %d", step)
				if rng.IntN(2) == 0 {
					tab.remove(h, k)
					delete(in, string(key))
				}
			} else {
				require.Nil(t, tab.find(h, key), "step %d", step)
				k := newTimerKey(key, 0)
				tab.insert(h, k)
				in[string(key)] = k
			}
			require.Equal(t, len(in), tab.len())
			if step%10 != 0 {
				continue
			}
			for s, k := range in {
				require.Same(t, k, tab.find(hashes[s], []byte(s)), "step %d: %s", step, s)
			}
		}
	}
}

// A key record fills two cache lines exactly (see timerKey): a field added
// to it must find room or move something out.
func TestTimerKeySize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is for 64-bit platforms")
	}
	require.Equal(t, uintptr(128), unsafe.Sizeof(timerKey{}))
}
