package weir

import (
	"context"
	"net"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/deploy"
)

// TestHarness is the runtime's seam for test harnesses that inject faults
// into a job (package weirtest is one): the runtime calls it at a few
// well-defined points of a job run. It is not for production jobs. Without
// WithTestHarness none of these calls exist: records take their usual path.
type TestHarness interface {
	// Operator is called when an attempt of the job deploys one subtask
	// of an operator (a source, an operator or a sink), before the
	// attempt runs. The probe it returns (nil: none) is called at that
	// subtask's fixed points, from its task's goroutine.
	Operator(info OperatorInfo) OperatorProbe
	// Dial opens the TCP connections of the job's exchanges
	// (WithTCPExchanges); a harness wraps them to reset them.
	Dial(ctx context.Context, addr string) (net.Conn, error)
}

// OperatorKind tells sources, operators and sinks apart.
type OperatorKind uint8

// Operator kinds.
const (
	SourceOperator OperatorKind = iota
	InnerOperator               // neither a source nor a sink
	SinkOperator
)

func (k OperatorKind) String() string {
	switch k {
	case SourceOperator:
		return "source"
	case SinkOperator:
		return "sink"
	}
	return "operator"
}

// operatorKind is the runtime's kind k as an OperatorKind.
func operatorKind(k deploy.ProbeKind) OperatorKind {
	switch k {
	case deploy.ProbeSource:
		return SourceOperator
	case deploy.ProbeSink:
		return SinkOperator
	}
	return InnerOperator
}

// OperatorInfo names one subtask of an operator in one attempt of a job.
type OperatorInfo struct {
	// Attempt numbers the job's attempts: 0, then one more per restart.
	Attempt int
	// UID is the operator's stable ID (Stream.UID), Name its name.
	UID, Name            string
	Kind                 OperatorKind
	Subtask, Parallelism int
	// Restored is the checkpoint the attempt restores from (0: none).
	Restored barrier.CheckpointID
	// Finished reports a subtask restored as finished: it had finished
	// when the checkpoint was taken, so it runs nothing (no records, no
	// polls, no snapshots).
	Finished bool
}

// OperatorProbe is called at the fixed points of one operator subtask of a
// job under a test harness. A method that returns an error fails the task
// with it, as a failure of the operator's own code would.
type OperatorProbe interface {
	// Record is called before the operator processes each value; for a
	// source, before it emits each value.
	Record() error
	// Snapshot is called before the operator snapshots its state for
	// checkpoint id.
	Snapshot(id barrier.CheckpointID) error
	// CheckpointComplete is called before the operator learns that
	// checkpoint id completed (two-phase-commit sinks commit then).
	CheckpointComplete(id barrier.CheckpointID) error
	// Hold is called by a source subtask before each poll of its reader,
	// and with ended set once the reader is exhausted (then before each
	// poll of the ended source, until Hold lets it end). hold = true
	// holds the source: it emits nothing and does not end, its task keeps
	// taking checkpoints, and it calls Hold again once wake is ready or a
	// checkpoint message reached the task.
	Hold(ended bool) (hold bool, wake <-chan struct{})
}

// WithTestHarness runs the job under a test harness (see TestHarness):
// for test harnesses such as package weirtest only. It works for jobs run
// in this process (not with WithCluster).
func WithTestHarness(h TestHarness) Option {
	return optionFunc(func(c *config) { c.harness = h })
}

// harnessAdapter hands a TestHarness to the runtime.
type harnessAdapter struct{ h TestHarness }

func (a harnessAdapter) Probe(i deploy.ProbeInfo) deploy.Probe {
	p := a.h.Operator(OperatorInfo{Attempt: i.Attempt, UID: i.UID, Name: i.Name, Kind: operatorKind(i.Kind),
		Subtask: i.Subtask, Parallelism: i.Parallelism, Restored: i.Restored, Finished: i.Finished})
	if p == nil {
		return nil
	}
	return p
}

func (a harnessAdapter) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return a.h.Dial(ctx, addr)
}

// probed passes values on after calling probe (jobs under a test harness
// only).
type probed[T any] struct {
	next  collector[T]
	gnext groupCollector[T] // next, if it takes key groups
	probe func() error
}

func (p *probed[T]) collect(v T, ts int64) error {
	if err := p.probe(); err != nil {
		return err
	}
	return p.next.collect(v, ts)
}

func (p *probed[T]) collectInGroup(v T, ts int64, g int) error {
	if err := p.probe(); err != nil {
		return err
	}
	if p.gnext != nil {
		return p.gnext.collectInGroup(v, ts, g)
	}
	return p.next.collect(v, ts)
}

// probeCollector wraps a collector[T] (nil: one that drops values) in one
// that calls probe before each value.
func probeCollector[T any](c any, probe func() error) any {
	next, _ := c.(collector[T])
	if next == nil {
		next = discard[T]{}
	}
	gnext, _ := next.(groupCollector[T])
	return &probed[T]{next: next, gnext: gnext, probe: probe}
}
