package deploy

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

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
	rc.PrevParallelism = len(keys)
	for _, k := range keys {
		ts := rp.Meta.Tasks[k]
		for op, s := range ts.Operators {
			rc.Operators[op] = append(rc.Operators[op], s)
		}
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
	return rc
}

// ErrRescale is wrapped by Check's errors: the restore point cannot be
// restored at the job's parallelism.
var ErrRescale = errors.New("weir: cannot restore at another parallelism")

// Check reports why the restore point cannot be restored into g, if it
// cannot: it holds in-flight data (an unaligned checkpoint) and some
// vertex's parallelism differs from the checkpoint's, so the data of a
// channel would have no channel to go to; or a vertex whose subtasks
// partly finished is rescaled.
func (rp *RestorePoint) Check(g *graph.JobGraph) error {
	prev := map[string]int{}
	finished := map[string]int{}
	channels := false
	for k, ts := range rp.Meta.Tasks {
		prev[k.Vertex]++
		if ts.Finished {
			finished[k.Vertex]++
		}
		channels = channels || ts.Channels != nil
	}
	for _, v := range g.Vertices {
		n, ok := prev[v.ID]
		if !ok || n == v.Parallelism {
			continue
		}
		if channels {
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
