package deploy

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/state"
)

// Split redistribution of operator state depends on the order of the
// subtask states: every subtask must see them in subtask order, or two
// subtasks may restore the same elements and none the others.
func TestRestoreConfigOrdersSubtasks(t *testing.T) {
	m := state.Metadata{ID: 7, Tasks: map[state.TaskKey]state.TaskSnapshot{}}
	for i := range 8 {
		m.Tasks[state.TaskKey{Vertex: "v", Subtask: i}] = state.TaskSnapshot{Operators: map[string]state.OperatorSubtaskState{
			"op": {Operator: &state.OperatorStateHandle{StreamHandle: state.StreamHandle{Path: string(rune('a' + i))}}},
		}}
	}
	m.Tasks[state.TaskKey{Vertex: "other"}] = state.TaskSnapshot{Operators: map[string]state.OperatorSubtaskState{"op": {}}}
	for range 20 {
		rc := (&RestorePoint{Meta: m}).ForVertex("v")
		var got string
		for _, s := range rc.Operators["op"] {
			got += s.Operator.Path
		}
		require.Equal(t, "abcdefgh", got)
	}
}
