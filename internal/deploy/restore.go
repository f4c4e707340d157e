package deploy

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// RestorePoint is a completed checkpoint or savepoint and the storage that
// reads its state files.
type RestorePoint struct {
	Meta   state.Metadata
	Reader state.StateReader
}

// ForVertex extracts what the tasks of vertex v need to restore: the state
// of each of its operators, found by operator ID wherever the operator ran
// in the checkpoint (in another chain, at another parallelism), and the
// channel state and finished flags of the vertex's tasks. Each operator's
// subtask states are in subtask order, so that every subtask (in whatever
// process) sees the same order when operator state is redistributed.
func (rp *RestorePoint) ForVertex(v *graph.Vertex) *task.RestoreConfig {
	rc := &task.RestoreConfig{ID: rp.Meta.ID, Operators: map[string][]state.OperatorSubtaskState{}, Reader: rp.Reader}
	want := make(map[string]bool, len(v.Nodes))
	for _, n := range v.Nodes {
		want[n.UID] = true
	}
	type sub struct {
		i int
		s state.OperatorSubtaskState
	}
	found := map[string][]sub{}
	for k, ts := range rp.Meta.Tasks {
		for op, s := range ts.Operators {
			if want[op] {
				found[op] = append(found[op], sub{k.Subtask, s})
			}
		}
		if k.Vertex != v.ID {
			continue
		}
		rc.PrevParallelism++
		if ts.Channels != nil {
			if rc.Channels == nil {
				rc.Channels = map[int]*state.ChannelStateHandle{}
			}
			rc.Channels[k.Subtask] = ts.Channels
		}
		if ts.Finished {
			if rc.Finished == nil {
				rc.Finished = map[int]bool{}
			}
			rc.Finished[k.Subtask] = true
		}
	}
	for op, subs := range found {
		slices.SortFunc(subs, func(a, b sub) int { return cmp.Compare(a.i, b.i) })
		for _, s := range subs {
			rc.Operators[op] = append(rc.Operators[op], s.s)
		}
	}
	return rc
}

// ErrRescale is wrapped by Check's errors: the restore point cannot be
// restored at the job's parallelism.
var ErrRescale = errors.New("weir: cannot restore at another parallelism")

// Check reports why the restore point cannot be restored into g, if it
// cannot: it holds in-flight data (an unaligned checkpoint) and some
// vertex's parallelism or chain differs from the checkpoint's, so the data
// of a channel would have no channel, or another operator, to go to; or a
// vertex whose subtasks partly finished is rescaled.
func (rp *RestorePoint) Check(g *graph.JobGraph) error {
	prev := map[string]int{}
	finished := map[string]int{}
	chains := map[string][]string{} // the operator IDs of each vertex, sorted
	withChannels := map[string]bool{}
	for k, ts := range rp.Meta.Tasks {
		prev[k.Vertex]++
		if ts.Finished {
			finished[k.Vertex]++
		}
		if ts.Channels != nil {
			withChannels[k.Vertex] = true
		}
		if _, ok := chains[k.Vertex]; !ok && len(ts.Operators) > 0 {
			chains[k.Vertex] = sortedIDs(ts.Operators)
		}
	}
	byID := map[string]*graph.Vertex{}
	for _, v := range g.Vertices {
		byID[v.ID] = v
	}
	for id := range withChannels {
		v := byID[id]
		var now []string
		if v != nil {
			for _, n := range v.Nodes {
				now = append(now, n.UID)
			}
			slices.Sort(now)
		}
		if !slices.Equal(now, chains[id]) {
			return fmt.Errorf("%w: checkpoint %d is unaligned: it holds the data in flight between the tasks, which restores only into "+
				"the same chains of operators (the chain of operators %v is now %v); restore from an aligned savepoint instead (savepoints "+
				"are always aligned: take one with Job.TriggerSavepoint or Job.StopWithSavepoint)", ErrRescale, rp.Meta.ID, chains[id], now)
		}
	}
	for _, v := range g.Vertices {
		n, ok := prev[v.ID]
		if !ok || n == v.Parallelism {
			continue
		}
		if len(withChannels) > 0 {
			return fmt.Errorf("%w: checkpoint %d is unaligned: it holds the data in flight between the tasks, which restores only at the "+
				"parallelism it was taken at (%s: %d, now %d); restore from an aligned savepoint instead (savepoints are always aligned: "+
				"take one with Job.TriggerSavepoint or Job.StopWithSavepoint)", ErrRescale, rp.Meta.ID, v.Name, n, v.Parallelism)
		}
		if f := finished[v.ID]; f > 0 && f < n {
			return fmt.Errorf("%w: in checkpoint %d, %d of the %d subtasks of %s had finished; a vertex that partly finished restores only at "+
				"its parallelism (now %d)", ErrRescale, rp.Meta.ID, f, n, v.Name, v.Parallelism)
		}
	}
	return nil
}

func sortedIDs(m map[string]state.OperatorSubtaskState) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// ErrNonRestoredState is wrapped by a *NonRestoredError.
var ErrNonRestoredState = errors.New("weir: the restore point holds state that no operator of the job takes")

// NonRestoredError says which operators of a restore point hold state
// that the job to restore has no operator for (by operator ID).
type NonRestoredError struct {
	Checkpoint barrier.CheckpointID
	Operators  []OperatorRef // sorted by ID
}

// OperatorRef names an operator of a restore point.
type OperatorRef struct {
	ID   string
	Name string // "" if the restore point does not record it (metadata before version 5)
}

func (r OperatorRef) String() string {
	if r.Name == "" {
		return fmt.Sprintf("ID %q", r.ID)
	}
	return fmt.Sprintf("%s (ID %q)", r.Name, r.ID)
}

func (e *NonRestoredError) Error() string {
	names := make([]string, len(e.Operators))
	for i, op := range e.Operators {
		names[i] = op.String()
	}
	return fmt.Sprintf("weir: checkpoint %d holds state of operators that the job does not have: %s. An operator's state is "+
		"restored into the operator with the same ID: its UID, or without one an ID generated from the job's topology, which "+
		"changes when operators are added or removed on its paths. Set UIDs (Stream.UID, Sink.UID) on the stateful operators, "+
		"the IDs above on the operators that are to take that state, or start with WithAllowNonRestoredState(true) to drop it",
		e.Checkpoint, strings.Join(names, ", "))
}

func (e *NonRestoredError) Unwrap() error { return ErrNonRestoredState }

// NonRestored lists the operators that hold state in the restore point
// but are not in g, sorted by ID. An operator whose subtasks snapshotted
// nothing (a stateless one) holds no state.
func (rp *RestorePoint) NonRestored(g *graph.JobGraph) []OperatorRef {
	have := map[string]bool{}
	for _, v := range g.Vertices {
		for _, n := range v.Nodes {
			have[n.UID] = true
		}
	}
	missing := map[string]string{} // ID → name
	for _, ts := range rp.Meta.Tasks {
		for id, s := range ts.Operators {
			if !have[id] && (s.Keyed != nil || s.Operator != nil) && missing[id] == "" {
				missing[id] = s.Name
			}
		}
	}
	out := make([]OperatorRef, 0, len(missing))
	for id, name := range missing {
		out = append(out, OperatorRef{ID: id, Name: name})
	}
	slices.SortFunc(out, func(a, b OperatorRef) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
