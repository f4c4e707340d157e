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
// in the checkpoint (in another chain, at another parallelism), the
// channel state of the vertex's tasks, and which of its subtasks had
// finished (see finishedAt). Each operator's subtask states are in subtask
// order, so that every subtask (in whatever process) sees the same order
// when operator state is redistributed.
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
	// An operator's subtasks that had finished hold no state but keep
	// their place: split-distributed operator state goes back to the
	// subtask that wrote it only if the list has one entry per subtask
	// (without them, a two-phase-commit sink's pending transaction went to
	// a subtask that restores finished, and was never committed).
	found := map[string][]sub{}
	running := map[string]bool{}
	for k, ts := range rp.Meta.Tasks {
		for op, s := range ts.Operators {
			if want[op] {
				found[op] = append(found[op], sub{k.Subtask, s})
				running[op] = running[op] || !s.Finished
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
	}
	for op, subs := range found {
		if !running[op] {
			continue // finished everywhere: its tasks restore finished
		}
		slices.SortFunc(subs, func(a, b sub) int { return cmp.Compare(a.i, b.i) })
		for _, s := range subs {
			rc.Operators[op] = append(rc.Operators[op], s.s)
		}
	}
	f := rp.finishedOps()
	for i := range v.Parallelism {
		if fin, run, _, _ := f.at(v, i); fin && !run {
			if rc.Finished == nil {
				rc.Finished = map[int]bool{}
			}
			rc.Finished[i] = true
		}
	}
	return rc
}

// finished is what a restore point says of finished operators (FLIP-147).
type finished struct {
	subtasks map[string]int          // operator ID → the subtasks it had
	ran      map[string]map[int]bool // operator ID → the subtasks where it had not finished
	done     map[string]map[int]bool // operator ID → the subtasks where it had finished
	// legacy holds the finished tasks of metadata before version 6, which
	// lists no operators of a finished task: by vertex, then subtask.
	legacy map[string]map[int]bool
}

func (rp *RestorePoint) finishedOps() finished {
	f := finished{subtasks: map[string]int{}, ran: map[string]map[int]bool{}, done: map[string]map[int]bool{}, legacy: map[string]map[int]bool{}}
	for k, ts := range rp.Meta.Tasks {
		if ts.Finished && len(ts.Operators) == 0 {
			if f.legacy[k.Vertex] == nil {
				f.legacy[k.Vertex] = map[int]bool{}
			}
			f.legacy[k.Vertex][k.Subtask] = true
		}
		for op, s := range ts.Operators {
			f.subtasks[op]++
			m := f.ran
			if s.Finished {
				m = f.done
			}
			if m[op] == nil {
				m[op] = map[int]bool{}
			}
			m[op][k.Subtask] = true
		}
	}
	return f
}

// fully reports whether operator op had finished in every subtask.
func (f finished) fully(op string) bool {
	return f.subtasks[op] > 0 && len(f.done[op]) == f.subtasks[op]
}

// at says of subtask i of vertex v whether some operator of it had
// finished there (fin; an operator that had finished in every subtask
// counts as finished in each, at any parallelism) and whether another had
// not (run), naming one of each. An operator the restore point lacks
// counts as neither: it has no input left to miss; so does one without a
// record in a subtask that metadata before version 6 records finished (it
// ran in that finished task). A subtask whose
// operators all had finished is deployed finished; one with both would
// be wrong either way (Check refuses it).
func (f finished) at(v *graph.Vertex, i int) (fin, run bool, finOp, runOp *graph.Node) {
	legacy := f.legacy[v.ID][i]
	if legacy {
		fin, finOp = true, v.Nodes[0]
	}
	for _, n := range v.Nodes {
		switch {
		case f.subtasks[n.UID] == 0:
		case f.fully(n.UID) || f.done[n.UID][i]:
			fin, finOp = true, n
		case legacy && !f.ran[n.UID][i]:
		default:
			run, runOp = true, n
		}
	}
	return fin, run, finOp, runOp
}

// ErrRescale is wrapped by Check's errors: the restore point cannot be
// restored at the job's parallelism.
var ErrRescale = errors.New("weir: cannot restore at another parallelism")

// ErrFinishedMixed is wrapped by Check's error for a task of operators of
// which some had finished in the restore point and some had not.
var ErrFinishedMixed = errors.New("weir: cannot restore finished and unfinished operators into one task")

// Check reports why the restore point cannot be restored into g, if it
// cannot: it holds in-flight data (an unaligned checkpoint) and some
// vertex's parallelism or chain differs from the checkpoint's, so the data
// of a channel would have no channel, or another operator, to go to; an
// operator or vertex whose subtasks partly finished is rescaled; or a task
// would hold operators of which some had finished and some had not
// (ErrFinishedMixed).
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
	f := rp.finishedOps()
	for _, v := range g.Vertices {
		for _, n := range v.Nodes {
			if d, subs := len(f.done[n.UID]), f.subtasks[n.UID]; d > 0 && d < subs && subs != v.Parallelism {
				return fmt.Errorf("%w: in checkpoint %d, %d of the %d subtasks of operator %s (ID %q) had finished; an operator that partly "+
					"finished restores only at its parallelism (now %d)", ErrRescale, rp.Meta.ID, d, subs, n.Name, n.UID, v.Parallelism)
			}
		}
		for i := range v.Parallelism {
			if fin, run, finOp, runOp := f.at(v, i); fin && run {
				return fmt.Errorf("%w: in checkpoint %d, operator %s (ID %q) had finished in subtask %d and operator %s (ID %q) had not, "+
					"and they are now chained into one task, which can run neither finished nor again: chain them as they were "+
					"(their parallelism, WithChaining), or restore from a savepoint taken before %s finished", ErrFinishedMixed,
					rp.Meta.ID, finOp.Name, finOp.UID, i, runOp.Name, runOp.UID, finOp.Name)
			}
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
// nothing (a stateless one) holds no state; one that had finished counts
// as holding state (its finish: restored under another ID, a source that
// had finished would read its input again).
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
			if !have[id] && (s.Keyed != nil || s.Operator != nil || s.Finished) && missing[id] == "" {
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

// ErrOperatorKindChanged is wrapped by an *OperatorKindError.
var ErrOperatorKindChanged = errors.New("weir: the restore point holds state of another kind of operator under an operator's ID")

// OperatorKindError says which operators of the job to restore have the
// ID of an operator of another kind in the restore point (a UID moved from
// a Reduce to a window): that state means something else to them.
type OperatorKindError struct {
	Checkpoint barrier.CheckpointID
	Operators  []KindChange // sorted by ID
}

// KindChange is an operator whose kind differs from the kind of the
// operator whose state its ID finds.
type KindChange struct {
	ID   string
	Name string // the operator's name in the job to restore
	Was  string // the kind of the operator in the restore point
	Now  string // its kind in the job to restore
}

func (e *OperatorKindError) Error() string {
	parts := make([]string, len(e.Operators))
	for i, c := range e.Operators {
		parts[i] = fmt.Sprintf("%s (ID %q) is a %s, but the state under its ID is a %s's", c.Name, c.ID, c.Now, c.Was)
	}
	return fmt.Sprintf("weir: checkpoint %d: %s. An operator restores only the state of an operator of its kind: give it a UID "+
		"of its own (and start with WithAllowNonRestoredState(true) to drop the other's state), or restore the operator that "+
		"kept that state", e.Checkpoint, strings.Join(parts, "; "))
}

func (e *OperatorKindError) Unwrap() error { return ErrOperatorKindChanged }

// CheckKinds fails with an *OperatorKindError if an operator of g has the
// ID of an operator of another kind that holds state (or had finished) in
// the restore point. Restore points of metadata before version 6 record
// no kinds and are not checked; version 6 recorded a source's name as its
// kind (FromReader's name, a file's, a Kafka source's topics), so a source
// of the job is not checked against a version-6 kind.
func (rp *RestorePoint) CheckKinds(g *graph.JobGraph) error {
	nodes := map[string]*graph.Node{}
	for _, v := range g.Vertices {
		for _, n := range v.Nodes {
			nodes[n.UID] = n
		}
	}
	changed := map[string]KindChange{}
	for _, ts := range rp.Meta.Tasks {
		for id, s := range ts.Operators {
			n := nodes[id]
			if n == nil || s.Kind == "" || s.Kind == n.Kind || (s.Keyed == nil && s.Operator == nil && !s.Finished) ||
				rp.Meta.Version == 6 && n.Source {
				continue
			}
			changed[id] = KindChange{ID: id, Name: n.Name, Was: s.Kind, Now: n.Kind}
		}
	}
	if len(changed) == 0 {
		return nil
	}
	e := &OperatorKindError{Checkpoint: rp.Meta.ID}
	for _, c := range changed {
		e.Operators = append(e.Operators, c)
	}
	slices.SortFunc(e.Operators, func(a, b KindChange) int { return cmp.Compare(a.ID, b.ID) })
	return e
}
