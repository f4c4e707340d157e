package deploy

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/internal/graph"
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
	m.Tasks[state.TaskKey{Vertex: "other"}] = state.TaskSnapshot{Operators: map[string]state.OperatorSubtaskState{"op2": {}}}
	for range 20 {
		rc := (&RestorePoint{Meta: m}).ForVertex(&graph.Vertex{ID: "v", Nodes: []*graph.Node{{UID: "op"}}})
		var got string
		for _, s := range rc.Operators["op"] {
			got += s.Operator.Path
		}
		require.Equal(t, "abcdefgh", got)
	}
}

// An operator's state is found under its ID wherever it ran: a vertex
// re-chained (here: the operator "op" ran chained behind "head" and now
// heads a vertex of its own) gets it, and none of the other operators'.
func TestRestoreConfigFindsOperatorsInOtherChains(t *testing.T) {
	m := state.Metadata{ID: 7, Tasks: map[state.TaskKey]state.TaskSnapshot{}}
	for i := range 2 {
		m.Tasks[state.TaskKey{Vertex: "head", Subtask: i}] = state.TaskSnapshot{Operators: map[string]state.OperatorSubtaskState{
			"head": {Operator: &state.OperatorStateHandle{StreamHandle: state.StreamHandle{Path: "h" + string(rune('0'+i))}}},
			"op":   {Operator: &state.OperatorStateHandle{StreamHandle: state.StreamHandle{Path: "o" + string(rune('0'+i))}}},
		}}
	}
	rc := (&RestorePoint{Meta: m}).ForVertex(&graph.Vertex{ID: "op", Nodes: []*graph.Node{{UID: "op"}, {UID: "new"}}})
	require.Len(t, rc.Operators, 1)
	require.Len(t, rc.Operators["op"], 2)
	require.Equal(t, "o0", rc.Operators["op"][0].Operator.Path)
	require.Equal(t, "o1", rc.Operators["op"][1].Operator.Path)
	require.Zero(t, rc.PrevParallelism, "no task of the vertex ran before")
}
