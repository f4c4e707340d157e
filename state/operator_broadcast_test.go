package state_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/state"
)

var broadcastDesc = state.ListDescriptor[int64]{Name: "broadcast", Codec: int64Codec{}}

// A broadcast-distributed list gives new subtask i the list of old subtask
// i mod the old parallelism, whole, at any parallelism; the backend lists
// its states' names.
func TestOperatorStateBroadcastDistribution(t *testing.T) {
	s := state.NewMemoryStorage()
	for _, tc := range []struct{ from, to int }{{2, 3}, {3, 2}, {1, 4}, {3, 3}, {4, 1}} {
		t.Run(fmt.Sprintf("%d->%d", tc.from, tc.to), func(t *testing.T) {
			var hs []*state.OperatorStateHandle
			for i := range tc.from {
				b := state.NewOperatorBackend()
				l, err := state.GetOperatorListState(b, broadcastDesc, state.BroadcastDistribute)
				require.NoError(t, err)
				// Old subtask i holds i*10, i*10+1 (a real broadcast state is
				// equal everywhere; distinct copies show which one arrives).
				require.NoError(t, l.Update([]int64{int64(10 * i), int64(10*i + 1)}))
				run, err := b.Snapshot(1, state.PrefixedWriters(s, fmt.Sprintf("b%d-%d-%d", tc.from, tc.to, i)))
				require.NoError(t, err)
				h, err := run(context.Background())
				require.NoError(t, err)
				hs = append(hs, h)
			}
			for i := range tc.to {
				b := state.NewOperatorBackend()
				require.NoError(t, b.Restore(hs, s, i, tc.to))
				require.Equal(t, []string{"broadcast"}, b.Names())
				l, err := state.GetOperatorListState(b, broadcastDesc, state.BroadcastDistribute)
				require.NoError(t, err)
				got, err := l.Get()
				require.NoError(t, err)
				old := i % tc.from
				require.Equal(t, []int64{int64(10 * old), int64(10*old + 1)}, got, "new subtask %d", i)
				_, err = state.GetOperatorListState(b, broadcastDesc, state.UnionDistribute)
				require.Error(t, err, "distribution mismatch")
			}
		})
	}
}
