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

// finishedTask is a task of a v6 checkpoint that had finished: its
// operators, each finished.
func finishedTask(ops ...string) state.TaskSnapshot {
	ts := state.TaskSnapshot{Operators: map[string]state.OperatorSubtaskState{}, Finished: true}
	for _, op := range ops {
		ts.Operators[op] = state.OperatorSubtaskState{Finished: true}
	}
	return ts
}

// Finished flags belong to operators: a source that had finished chained
// with a map ("src" heading [src, map]) is found finished when the map
// runs in a vertex of its own and the source in another (here headed by
// a new operator), and a task whose operators had not finished runs.
func TestFinishedByOperator(t *testing.T) {
	m := state.Metadata{ID: 3, Tasks: map[state.TaskKey]state.TaskSnapshot{
		{Vertex: "src", Subtask: 0}: finishedTask("src", "map"),
		{Vertex: "src", Subtask: 1}: finishedTask("src", "map"),
		{Vertex: "sum", Subtask: 0}: {Operators: map[string]state.OperatorSubtaskState{"sum": {Keyed: &state.KeyedStateHandle{}}}},
	}}
	rp := &RestorePoint{Meta: m}
	mapV := &graph.Vertex{ID: "map", Parallelism: 3, Nodes: []*graph.Node{{UID: "map"}}}
	srcV := &graph.Vertex{ID: "src", Parallelism: 2, Nodes: []*graph.Node{{UID: "src"}, {UID: "new"}}}
	sumV := &graph.Vertex{ID: "sum", Parallelism: 1, Nodes: []*graph.Node{{UID: "sum"}}}
	g := &graph.JobGraph{Vertices: []*graph.Vertex{srcV, mapV, sumV}}
	require.NoError(t, rp.Check(g))
	require.Equal(t, map[int]bool{0: true, 1: true, 2: true}, rp.ForVertex(mapV).Finished, "fully finished: at any parallelism")
	require.Equal(t, map[int]bool{0: true, 1: true}, rp.ForVertex(srcV).Finished)
	require.Empty(t, rp.ForVertex(sumV).Finished)
	require.Empty(t, rp.ForVertex(mapV).Operators, "a finished operator has no state to restore")

	// The finished map chained behind the running sum: neither finished
	// nor running is right.
	mixed := &graph.JobGraph{Vertices: []*graph.Vertex{srcV, {ID: "sum", Parallelism: 1, Nodes: []*graph.Node{{UID: "sum"}, {UID: "map"}}}}}
	require.ErrorIs(t, rp.Check(mixed), ErrFinishedMixed)
	require.ErrorContains(t, rp.Check(mixed), `operator  (ID "map") had finished in subtask 0 and operator  (ID "sum") had not`)

	// An operator that partly finished restores only at its parallelism.
	m.Tasks[state.TaskKey{Vertex: "src", Subtask: 1}] = state.TaskSnapshot{Operators: map[string]state.OperatorSubtaskState{
		"src": {Operator: &state.OperatorStateHandle{}}, "map": {}}}
	require.NoError(t, rp.Check(&graph.JobGraph{Vertices: []*graph.Vertex{srcV}}))
	require.Equal(t, map[int]bool{0: true}, rp.ForVertex(srcV).Finished)
	err := rp.Check(&graph.JobGraph{Vertices: []*graph.Vertex{{ID: "map", Parallelism: 3, Nodes: []*graph.Node{{UID: "map", Name: "m"}}}}})
	require.ErrorIs(t, err, ErrRescale)
	require.ErrorContains(t, err, `1 of the 2 subtasks of operator m (ID "map") had finished`)

	// A finished operator the job lacks is unrestored state.
	require.Equal(t, []OperatorRef{{ID: "map"}, {ID: "src"}}, rp.NonRestored(&graph.JobGraph{Vertices: []*graph.Vertex{sumV}}))
}

// Metadata before version 6 records a finished task without operators:
// its vertex finds it finished, as before.
func TestFinishedLegacyByVertex(t *testing.T) {
	rp := &RestorePoint{Meta: state.Metadata{ID: 3, Tasks: map[state.TaskKey]state.TaskSnapshot{
		{Vertex: "src", Subtask: 0}: {Operators: map[string]state.OperatorSubtaskState{}, Finished: true},
		{Vertex: "src", Subtask: 1}: {Operators: map[string]state.OperatorSubtaskState{"src": {Operator: &state.OperatorStateHandle{}}}},
	}}}
	v := &graph.Vertex{ID: "src", Parallelism: 2, Nodes: []*graph.Node{{UID: "src"}}}
	require.NoError(t, rp.Check(&graph.JobGraph{Vertices: []*graph.Vertex{v}}))
	require.Equal(t, map[int]bool{0: true}, rp.ForVertex(v).Finished)
}

// An operator's state goes only to an operator of its kind: a Reduce's ID
// on a window is refused, naming both kinds; a stateless operator of
// another kind, and metadata without kinds, are not.
func TestCheckKinds(t *testing.T) {
	rp := &RestorePoint{Meta: state.Metadata{ID: 4, Tasks: map[state.TaskKey]state.TaskSnapshot{
		{Vertex: "sum"}: {Operators: map[string]state.OperatorSubtaskState{
			"sum":   {Kind: "reduce", Keyed: &state.KeyedStateHandle{}},
			"m":     {Kind: "map"},
			"old":   {Keyed: &state.KeyedStateHandle{}},
			"sink":  {Kind: "file sink", Finished: true},
			"other": {Kind: "process", Keyed: &state.KeyedStateHandle{}},
		}},
	}}}
	v := &graph.Vertex{ID: "sum", Nodes: []*graph.Node{{UID: "sum", Name: "totals", Kind: "window reduce"}, {UID: "m", Kind: "filter"},
		{UID: "old", Kind: "process"}, {UID: "sink", Name: "out", Kind: "kafka sink"}, {UID: "other", Kind: "process"}}}
	err := rp.CheckKinds(&graph.JobGraph{Vertices: []*graph.Vertex{v}})
	require.ErrorIs(t, err, ErrOperatorKindChanged)
	var ke *OperatorKindError
	require.ErrorAs(t, err, &ke)
	require.Equal(t, []KindChange{{ID: "sink", Name: "out", Was: "file sink", Now: "kafka sink"},
		{ID: "sum", Name: "totals", Was: "reduce", Now: "window reduce"}}, ke.Operators)
	require.ErrorContains(t, err, `totals (ID "sum") is a window reduce, but the state under its ID is a reduce's`)
	v.Nodes[0].Kind, v.Nodes[3].Kind = "reduce", "file sink"
	require.NoError(t, rp.CheckKinds(&graph.JobGraph{Vertices: []*graph.Vertex{v}}))
}

// Version 6 recorded a source's name as its kind: a source of the job is
// not checked against it (another kind of operator still is); version 7
// kinds are checked for sources too.
func TestCheckKindsOfVersion6Sources(t *testing.T) {
	meta := func(version uint16) state.Metadata {
		return state.Metadata{ID: 4, Version: version, Tasks: map[state.TaskKey]state.TaskSnapshot{
			{Vertex: "src"}: {Operators: map[string]state.OperatorSubtaskState{
				"src":  {Kind: "orders", Operator: &state.OperatorStateHandle{}},
				"src2": {Kind: "kafka source orders", Finished: true},
				"sum":  {Kind: "orders-sum", Keyed: &state.KeyedStateHandle{}},
			}},
		}}
	}
	g := &graph.JobGraph{Vertices: []*graph.Vertex{{ID: "src", Nodes: []*graph.Node{
		{UID: "src", Name: "orders-v2", Kind: "source", Source: true},
		{UID: "src2", Name: "kafka source orders,refunds", Kind: "split source", Source: true},
		{UID: "sum", Name: "sum", Kind: "process"}}}}}
	rp := &RestorePoint{Meta: meta(6)}
	err := rp.CheckKinds(g)
	var ke *OperatorKindError
	require.ErrorAs(t, err, &ke)
	require.Equal(t, []KindChange{{ID: "sum", Name: "sum", Was: "orders-sum", Now: "process"}}, ke.Operators)
	g.Vertices[0].Nodes = g.Vertices[0].Nodes[:2]
	require.NoError(t, rp.CheckKinds(g))
	rp = &RestorePoint{Meta: meta(0)}
	require.ErrorAs(t, rp.CheckKinds(g), &ke)
	require.Len(t, ke.Operators, 2)
}
