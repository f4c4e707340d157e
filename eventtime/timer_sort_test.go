package eventtime

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The radix sort orders like timerCompare: keys that share their first
// bytes, keys longer than 16 bytes that differ only after them, empty
// keys, several namespaces per key; one timestamp, a few (groups above and
// below the radix threshold), all distinct, negative ones, some on either
// side of a power of two.
func TestTimerSorterMatchesCompare(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	keyKinds := []func(i int) []byte{
		func(i int) []byte { return []byte(fmt.Sprintf("user-%06d", i)) },
		func(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)*0x9e3779b97f4a7c15) },
		func(i int) []byte { return []byte(fmt.Sprintf("a-long-shared-prefix-%d", i%50)) },
		func(i int) []byte { return []byte{byte(i % 3)} },
		func(i int) []byte { return nil },
	}
	stampKinds := []func(i int) int64{
		func(int) int64 { return 1000 },
		func(i int) int64 { return int64(i%3) * 1000 },
		func(int) int64 { return int64(rng.IntN(2*timerRadixMin)) - timerRadixMin },
		func(i int) int64 { return int64(uint64(i) * 0x9e3779b97f4a7c15) },
		func(i int) int64 { return 1<<20 - 100 + int64(i*7919%200)*3 }, // across a power of two
	}
	for _, n := range []int{timerRadixMin - 1, timerRadixMin, 1000, 5000} {
		for kind, key := range keyKinds {
			for skind, stamps := range stampKinds {
				t.Run(fmt.Sprintf("n=%d/keys=%d/stamps=%d", n, kind, skind), func(t *testing.T) {
					keys := map[string]*timerKey{}
					e := make([]timerEntry, n)
					for i := range e {
						kb := key(rng.IntN(n))
						k := keys[string(kb)]
						if k == nil {
							k = newTimerKey(kb, 0)
							keys[string(kb)] = k
						}
						e[i] = timerEntry{ts: stamps(i), prefix: k.prefix(), k: k, ns: string(rune('a' + rng.IntN(4)))}
					}
					want := slices.Clone(e)
					slices.SortStableFunc(want, func(x, y timerEntry) int { return timerCompare(&x, &y) })
					var s timerSorter
					e = s.sort(e)
					for i := range e {
						require.Zero(t, timerCompare(&want[i], &e[i]), "entry %d", i)
					}
				})
			}
		}
	}
}
