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

// ForHash's shortcut for powers of two gives the remainder's key group.
func TestForHashIsTheRemainder(t *testing.T) {
	for _, maxP := range []int{1, 2, 3, 7, 64, 128, 1000, 1 << 15} {
		for i := range uint64(10000) {
			h := i * 0x9e3779b97f4a7c15
			require.Equal(t, int(Mix(h)%uint64(maxP)), ForHash(h, maxP), "maxP=%d h=%#x", maxP, h)
		}
	}
}
