package deploy

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/state"
)

// An operator that had finished in some subtasks and not in others keeps
// one entry per subtask, in subtask order, the finished ones without
// state: split-distributed operator state (a two-phase-commit sink's
// pending transactions) then goes back to the subtask that wrote it, not
// to one that restores finished and never opens. An operator finished
// everywhere has no entries (its tasks restore finished).
func TestRestoreConfigKeepsFinishedSubtasksInPlace(t *testing.T) {
	sink := func(path string) state.TaskSnapshot {
		return state.TaskSnapshot{Operators: map[string]state.OperatorSubtaskState{
			"sink": {Kind: "two-phase-commit sink", Operator: &state.OperatorStateHandle{StreamHandle: state.StreamHandle{Path: path}}},
			"done": {Kind: "map", Finished: true},
		}}
	}
	for _, finished := range []int{0, 1, 2} {
		m := state.Metadata{ID: 2, Tasks: map[state.TaskKey]state.TaskSnapshot{}}
		for i := range 3 {
			m.Tasks[state.TaskKey{Vertex: "v", Subtask: i}] = sink(string(rune('a' + i)))
		}
		m.Tasks[state.TaskKey{Vertex: "v", Subtask: finished}] = finishedTask("sink", "done")
		rc := (&RestorePoint{Meta: m}).ForVertex(&graph.Vertex{ID: "v", Parallelism: 3, Nodes: []*graph.Node{{UID: "sink"}, {UID: "done"}}})
		got := rc.Operators["sink"]
		require.Len(t, got, 3, "finished subtask %d", finished)
		for i, s := range got {
			if i == finished {
				require.True(t, s.Finished)
				require.Nil(t, s.Operator)
				continue
			}
			require.False(t, s.Finished)
			require.Equal(t, string(rune('a'+i)), s.Operator.Path)
		}
		require.NotContains(t, rc.Operators, "done")
	}
}
