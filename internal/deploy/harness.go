package deploy

import (
	"context"
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
}

// Probe is what the runtime calls at an operator subtask's fixed points
// (see weir.OperatorProbe).
type Probe interface {
	Record() error
	Snapshot(id barrier.CheckpointID) error
	CheckpointComplete(id barrier.CheckpointID) error
	Hold(ended bool) (hold bool, wake <-chan struct{})
}

// probeFor returns the harness's probe for subtask i of node n (nil
// without a harness).
func (b *builder) probeFor(n *graph.Node, i, par int) Probe {
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

// The optional interfaces the task looks for on its operators; a probed
// operator keeps those its operator implements. A new optional interface
// of task.Operator must be added here (TestProbedOperatorKeepsInterfaces).
type (
	eventTimePart      struct{ op task.EventTimeOperator }
	processingTimePart struct{ op task.ProcessingTimeOperator }
	lateCounterPart    struct{ op task.LateCounter }
)

func (p eventTimePart) ProcessWatermark(wm int64) (bool, error) { return p.op.ProcessWatermark(wm) }
func (p eventTimePart) ProcessWatermarkStatus(s eventtime.Status) (bool, error) {
	return p.op.ProcessWatermarkStatus(s)
}
func (p processingTimePart) OnProcessingTime(now int64) error { return p.op.OnProcessingTime(now) }
func (p lateCounterPart) LateRecordsDropped() int64           { return p.op.LateRecordsDropped() }

// probeOperator wraps op so that p is called before its checkpoint hooks,
// keeping the optional interfaces op implements.
func probeOperator(op task.Operator, p Probe) task.Operator {
	w := &probedOp{Operator: op, p: p}
	et, isET := op.(task.EventTimeOperator)
	pt, isPT := op.(task.ProcessingTimeOperator)
	lc, isLC := op.(task.LateCounter)
	e, q, l := eventTimePart{et}, processingTimePart{pt}, lateCounterPart{lc}
	switch {
	case isET && isPT && isLC:
		return struct {
			*probedOp
			eventTimePart
			processingTimePart
			lateCounterPart
		}{w, e, q, l}
	case isET && isPT:
		return struct {
			*probedOp
			eventTimePart
			processingTimePart
		}{w, e, q}
	case isET && isLC:
		return struct {
			*probedOp
			eventTimePart
			lateCounterPart
		}{w, e, l}
	case isPT && isLC:
		return struct {
			*probedOp
			processingTimePart
			lateCounterPart
		}{w, q, l}
	case isET:
		return struct {
			*probedOp
			eventTimePart
		}{w, e}
	case isPT:
		return struct {
			*probedOp
			processingTimePart
		}{w, q}
	case isLC:
		return struct {
			*probedOp
			lateCounterPart
		}{w, l}
	}
	return w
}
