package keygroup

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Every key group belongs to exactly one subtask, and Operator agrees with
// RangeFor, for every parallelism.
func TestRangesPartitionKeyGroups(t *testing.T) {
	for _, maxP := range []int{1, 7, 128, 1000} {
		for p := 1; p <= maxP && p <= 64; p++ {
			owner := make([]int, maxP)
			for i := range owner {
				owner[i] = -1
			}
			for idx := 0; idx < p; idx++ {
				r := RangeFor(maxP, p, idx)
				for g := r.Start; g <= r.End; g++ {
					require.Equal(t, -1, owner[g], "group %d owned twice (maxP=%d p=%d)", g, maxP, p)
					owner[g] = idx
				}
			}
			for g, o := range owner {
				require.NotEqual(t, -1, o, "group %d unowned", g)
				require.Equal(t, o, Operator(g, maxP, p), "maxP=%d p=%d g=%d", maxP, p, g)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	require.NoError(t, Validate(128, 4))
	require.Error(t, Validate(128, 129))
	require.Error(t, Validate(0, 1))
	require.Error(t, Validate(128, 0))
}
