package weir

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// Readers of p subtasks read part of [0, n); rescaled to q subtasks (and
// again to r), the new readers read exactly the rest, each index once.
func TestStridedRescaleReadsTheRestExactlyOnce(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 300; iter++ {
		n := int64(rnd.IntN(500))
		pars := []int{1 + rnd.IntN(6), 1 + rnd.IntN(6), 1 + rnd.IntN(6)}
		var seen []int64
		positions := make([][]byte, pars[0])
		for sub := range pars[0] {
			s := newStrided(n, sub, pars[0])
			for k := rnd.IntN(60); k > 0; k-- {
				if i, ok := s.next(); ok {
					seen = append(seen, i)
				}
			}
			positions[sub] = s.encode()
		}
		for stage, par := range pars[1:] {
			next := make([][]byte, par)
			last := stage == len(pars)-2
			for sub := range par {
				var s strided
				s.n = n
				require.NoError(t, s.rescale(positions, sub, par))
				for k := rnd.IntN(60); last || k > 0; k-- {
					i, ok := s.next()
					if !ok {
						break
					}
					seen = append(seen, i)
				}
				next[sub] = s.encode()
			}
			positions = next
		}
		slices.Sort(seen)
		var want []int64
		for i := range n {
			want = append(want, i)
		}
		require.Equal(t, want, seen, "n=%d parallelisms %v", n, pars)
	}
}

func TestStridedRejectsCorruptPositions(t *testing.T) {
	var s strided
	require.Error(t, s.decode(make([]byte, 15)))
	require.Error(t, s.decode(make([]byte, 16)), "step 0")
}
