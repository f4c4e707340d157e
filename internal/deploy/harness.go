package deploy

import (
	"context"
	"fmt"
	"net"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/task"
)

// Harness is a test harness that injects faults into a job
// (weir.TestHarness): Deploy asks it for a probe per operator subtask and
// wires the probe into the subtask's record path, its checkpoint hooks and
// (for sources) its polls. Without a harness Deploy wires nothing.
type Harness interface {
	Probe(info ProbeInfo) Probe
	// Dial opens the connections of exchanges over TCP.
	Dial(ctx context.Context, addr string) (net.Conn, error)
}

// ProbeKind tells sources, operators and sinks apart.
type ProbeKind uint8

// Probe kinds.
const (
	ProbeSource ProbeKind = iota
	ProbeOperator
	ProbeSink
)

func (k ProbeKind) String() string {
	switch k {
	case ProbeSource:
		return "source"
	case ProbeSink:
		return "sink"
	}
	return "operator"
}

// ProbeInfo names one operator subtask of one attempt.
type ProbeInfo struct {
	Attempt              int
	UID, Name            string
	Kind                 ProbeKind
	Subtask, Parallelism int
	Restored             barrier.CheckpointID
	// Finished: the subtask is restored as finished and runs nothing.
	Finished bool
}

// Probe is what the runtime calls at an operator subtask's fixed points
// (see weir.OperatorProbe).
type Probe interface {
	Record() error
	Snapshot(id barrier.CheckpointID) error
	CheckpointComplete(id barrier.CheckpointID) error
	Hold(ended bool) (hold bool, wake <-chan struct{})
}

// probeFor returns the harness's probe for subtask i of node n of v (nil
// without a harness).
func (b *builder) probeFor(v *graph.Vertex, n *graph.Node, i int) Probe {
	par := v.Parallelism
	h := b.cfg.Harness
	if h == nil {
		return nil
	}
	info := ProbeInfo{Attempt: b.pl.Attempt, UID: n.UID, Name: n.Name, Kind: ProbeOperator, Subtask: i, Parallelism: par}
	switch {
	case n.Source:
		info.Kind = ProbeSource
	case len(n.Outputs) == 0:
		info.Kind = ProbeSink
	}
	if b.restore != nil {
		info.Restored = b.restore.Meta.ID
		info.Finished = b.restore.ForVertex(v).Finished[i]
	}
	return h.Probe(info)
}

// heldSource asks its probe before every poll whether to hold.
type heldSource struct {
	task.Source
	p     Probe
	ended bool
	wake  <-chan struct{}
}

func (s *heldSource) PollNext() (task.SourceStatus, error) {
	if hold, wake := s.p.Hold(s.ended); hold {
		s.wake = wake
		return task.NothingAvailable, nil
	}
	if s.ended {
		return task.EndOfInput, nil
	}
	st, err := s.Source.PollNext()
	if st == task.EndOfInput && err == nil {
		s.ended = true
		return s.PollNext()
	}
	s.wake = nil
	return st, err
}

func (s *heldSource) Available() <-chan struct{} {
	if s.wake != nil {
		return s.wake
	}
	return s.Source.Available()
}

// probedOp calls its probe before the operator's checkpoint hooks.
type probedOp struct {
	task.Operator
	p Probe
}

func (o *probedOp) SnapshotState(id barrier.CheckpointID) error {
	if err := o.p.Snapshot(id); err != nil {
		return err
	}
	return o.Operator.SnapshotState(id)
}

func (o *probedOp) NotifyCheckpointComplete(id barrier.CheckpointID) error {
	if err := o.p.CheckpointComplete(id); err != nil {
		return err
	}
	return o.Operator.NotifyCheckpointComplete(id)
}

// The optional interfaces the task looks for on its operators: a probed
// operator implements them all and behaves as the task does for an
// operator without one (a watermark passes on, no final checkpoint), except
// LateCounter, whose presence the task reports, so only probedLateOp has
// it. A new optional interface of task.Operator must be added here
// (TestProbedOperatorKeepsInterfaces).
func (o *probedOp) ProcessWatermark(wm int64) (bool, error) {
	if et, ok := o.Operator.(task.EventTimeOperator); ok {
		return et.ProcessWatermark(wm)
	}
	return true, nil
}

func (o *probedOp) ProcessWatermarkStatus(s eventtime.Status) (bool, error) {
	if et, ok := o.Operator.(task.EventTimeOperator); ok {
		return et.ProcessWatermarkStatus(s)
	}
	return true, nil
}

func (o *probedOp) OnProcessingTime(now int64) error {
	if pt, ok := o.Operator.(task.ProcessingTimeOperator); ok {
		return pt.OnProcessingTime(now)
	}
	return fmt.Errorf("requested processing time but has no OnProcessingTime")
}

func (o *probedOp) NeedsFinalCheckpoint() bool {
	f, ok := o.Operator.(task.FinalCheckpointOperator)
	return ok && f.NeedsFinalCheckpoint()
}

// probedLateOp is a probed operator that counts late records.
type probedLateOp struct {
	*probedOp
	lc task.LateCounter
}

func (o probedLateOp) LateRecordsDropped() int64 { return o.lc.LateRecordsDropped() }

// probeOperator wraps op so that p is called before its checkpoint hooks,
// keeping the optional interfaces op implements.
func probeOperator(op task.Operator, p Probe) task.Operator {
	w := &probedOp{Operator: op, p: p}
	if lc, ok := op.(task.LateCounter); ok {
		return probedLateOp{w, lc}
	}
	return w
}
