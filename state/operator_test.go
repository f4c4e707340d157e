package state_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/state"
)

var (
	splitDesc = state.ListDescriptor[int64]{Name: "split", Codec: int64Codec{}}
	unionDesc = state.ListDescriptor[int64]{Name: "union", Codec: int64Codec{}}
)

// snapshotOperators gives subtask i of p the split elements 100i..100i+n-1
// and the union element i, and snapshots them.
func snapshotOperators(t *testing.T, s state.Storage, p, n int) []*state.OperatorStateHandle {
	var hs []*state.OperatorStateHandle
	for i := range p {
		b := state.NewOperatorBackend()
		sl, err := state.GetOperatorListState(b, splitDesc, state.SplitDistribute)
		require.NoError(t, err)
		ul, err := state.GetOperatorListState(b, unionDesc, state.UnionDistribute)
		require.NoError(t, err)
		for j := range n {
			require.NoError(t, sl.Add(int64(100*i+j)))
		}
		require.NoError(t, ul.Add(int64(i)))
		run, err := b.Snapshot(1, state.PrefixedWriters(s, fmt.Sprint("op-", i)))
		require.NoError(t, err)
		// Changes after the synchronous part do not leak into the snapshot.
		require.NoError(t, sl.Add(-1))
		require.NoError(t, ul.Update([]int64{-1}))
		h, err := run(context.Background())
		require.NoError(t, err)
		hs = append(hs, h)
	}
	return hs
}

func TestOperatorStateRedistribution(t *testing.T) {
	s := state.NewMemoryStorage()
	for _, tc := range []struct{ from, to, n int }{{2, 3, 5}, {3, 1, 4}, {1, 4, 2}, {4, 2, 0}} {
		t.Run(fmt.Sprintf("%d->%d", tc.from, tc.to), func(t *testing.T) {
			hs := snapshotOperators(t, s, tc.from, tc.n)
			var all []int64
			for i := range tc.to {
				b := state.NewOperatorBackend()
				require.NoError(t, b.Restore(hs, s, i, tc.to))
				sl, err := state.GetOperatorListState(b, splitDesc, state.SplitDistribute)
				require.NoError(t, err)
				got, err := sl.Get()
				require.NoError(t, err)
				total := tc.from * tc.n
				require.InDelta(t, float64(total)/float64(tc.to), len(got), 1, "even split")
				all = append(all, got...)
				ul, err := state.GetOperatorListState(b, unionDesc, state.UnionDistribute)
				require.NoError(t, err)
				u, err := ul.Get()
				require.NoError(t, err)
				want := make([]int64, tc.from)
				for j := range want {
					want[j] = int64(j)
				}
				require.Equal(t, want, u, "union: everyone gets all")
				_, err = state.GetOperatorListState(b, unionDesc, state.SplitDistribute)
				require.Error(t, err, "distribution mismatch")
			}
			var want []int64
			for i := range tc.from {
				for j := range tc.n {
					want = append(want, int64(100*i+j))
				}
			}
			slices.Sort(all)
			require.Equal(t, want, all)
		})
	}
	b := state.NewOperatorBackend()
	require.Error(t, b.Restore(nil, s, 3, 3))
}

func TestOperatorStateCorruptOffsets(t *testing.T) {
	s := state.NewMemoryStorage()
	hs := snapshotOperators(t, s, 1, 3)
	h := *hs[0]
	h.States = map[string]state.OperatorStateMeta{"split": {Offsets: []int64{1 << 20}}}
	var ce *state.CorruptError
	require.ErrorAs(t, state.NewOperatorBackend().Restore([]*state.OperatorStateHandle{&h}, s, 0, 1), &ce)
}

func TestEmptyOperatorSnapshot(t *testing.T) {
	run, err := state.NewOperatorBackend().Snapshot(1, state.NewMemoryStorage())
	require.NoError(t, err)
	h, err := run(context.Background())
	require.NoError(t, err)
	require.Nil(t, h)
}

// At an unchanged parallelism every subtask gets its own split-distributed
// list back, in order, however uneven the lists were.
func TestOperatorStateSameParallelismKeepsAssignment(t *testing.T) {
	s := state.NewMemoryStorage()
	var hs []*state.OperatorStateHandle
	for i, n := range []int{5, 1, 0} {
		b := state.NewOperatorBackend()
		sl, err := state.GetOperatorListState(b, splitDesc, state.SplitDistribute)
		require.NoError(t, err)
		for j := range n {
			require.NoError(t, sl.Add(int64(100*i+j)))
		}
		run, err := b.Snapshot(1, state.PrefixedWriters(s, fmt.Sprint("same-", i)))
		require.NoError(t, err)
		h, err := run(context.Background())
		require.NoError(t, err)
		hs = append(hs, h)
	}
	want := [][]int64{{0, 1, 2, 3, 4}, {100}, nil}
	for i := range 3 {
		b := state.NewOperatorBackend()
		require.NoError(t, b.Restore(hs, s, i, 3))
		sl, err := state.GetOperatorListState(b, splitDesc, state.SplitDistribute)
		require.NoError(t, err)
		got, err := sl.Get()
		require.NoError(t, err)
		if len(want[i]) == 0 {
			require.Empty(t, got)
			continue
		}
		require.Equal(t, want[i], got)
	}
}
