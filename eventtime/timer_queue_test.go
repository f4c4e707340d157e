package eventtime

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The queue takes its entries in timerCompare order whatever the pushes,
// takes and filters in between: runs sealed at every size (below and above
// the radix threshold), merged, partly taken, filtered.
func TestTimerQueueAgainstModel(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 3))
			keys := make([]*timerKey, 50)
			for i := range keys {
				keys[i] = newTimerKey([]byte(fmt.Sprintf("key-%d", i*7919%1000)), 0)
			}
			var q timerQueue
			var model []timerEntry
			cmpEntries := func(a, b timerEntry) int { return timerCompare(&a, &b) }
			now := int64(0)
			for step := range 1500 {
				switch op := rng.IntN(100); {
				case op < 50:
					// A burst: one timestamp for many keys, or spread.
					n := 1 + rng.IntN(1+rng.IntN(600))
					spread := []int64{1, 5, 1 << 40}[rng.IntN(3)]
					for range n {
						e := timerEntry{ts: now + rng.Int64N(spread) - 2, k: keys[rng.IntN(len(keys))], ns: []string{"", "a", "b"}[rng.IntN(3)]}
						e.prefix = e.k.prefix()
						q.push(e)
						model = append(model, e)
					}
				case op < 95:
					n := rng.IntN(1 + rng.IntN(1500))
					slices.SortFunc(model, cmpEntries)
					for range n {
						if len(model) == 0 {
							break
						}
						ts, ok := q.minTimestamp()
						require.True(t, ok)
						require.Equal(t, model[0].ts, ts, "step %d", step)
						got := q.take()
						require.Zero(t, timerCompare(&model[0], &got), "step %d: got %d/%s/%s, want %d/%s/%s", step, got.ts, got.k.key, got.ns, model[0].ts, model[0].k.key, model[0].ns)
						model = model[1:]
					}
					now += rng.Int64N(4)
				default:
					drop := keys[rng.IntN(len(keys))]
					q.filter(func(e timerEntry) bool { return e.k != drop })
					model = slices.DeleteFunc(model, func(e timerEntry) bool { return e.k == drop })
				}
				require.Equal(t, len(model), q.len(), "step %d", step)
				// Run lengths fall geometrically: O(log n) runs.
				require.LessOrEqual(t, len(q.runs), 2+bits.Len(uint(q.len())), "step %d: runs", step)
			}
		})
	}
}
