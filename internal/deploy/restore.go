package deploy

import (
	"cmp"
	"slices"

	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// RestorePoint is a completed checkpoint or savepoint and the storage that
// reads its state files.
type RestorePoint struct {
	Meta   state.Metadata
	Reader state.StateReader
}

// ForVertex extracts what the tasks of one vertex need to restore. Each
// operator's subtask states are in subtask order, so that every subtask
// (in whatever process) sees the same order when operator state is
// redistributed.
func (rp *RestorePoint) ForVertex(vertex string) *task.RestoreConfig {
	rc := &task.RestoreConfig{ID: rp.Meta.ID, Operators: map[string][]state.OperatorSubtaskState{}, Reader: rp.Reader}
	var keys []state.TaskKey
	for k := range rp.Meta.Tasks {
		if k.Vertex == vertex {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b state.TaskKey) int { return cmp.Compare(a.Subtask, b.Subtask) })
	for _, k := range keys {
		for op, s := range rp.Meta.Tasks[k].Operators {
			rc.Operators[op] = append(rc.Operators[op], s)
		}
	}
	return rc
}
