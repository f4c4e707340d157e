package deploy

import (
	"testing"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/task"
)

// fullOp implements task.Operator and every optional interface the task
// looks for.
type fullOp struct{ task.Operator }

func (fullOp) ProcessWatermark(int64) (bool, error)                  { return false, nil }
func (fullOp) ProcessWatermarkStatus(eventtime.Status) (bool, error) { return false, nil }
func (fullOp) OnProcessingTime(int64) error                          { return nil }
func (fullOp) NeedsFinalCheckpoint() bool                            { return true }
func (fullOp) LateRecordsDropped() int64                             { return 7 }

type nopProbe struct{}

func (nopProbe) Record() error                                 { return nil }
func (nopProbe) Snapshot(barrier.CheckpointID) error           { return nil }
func (nopProbe) CheckpointComplete(barrier.CheckpointID) error { return nil }
func (nopProbe) Hold(bool) (bool, <-chan struct{})             { return false, nil }

// A probed operator behaves as its operator towards the task: the
// optional interfaces answer as the operator does, or as the task does
// for an operator without them. A new optional interface of task.Operator
// must be added to probedOp and here.
func TestProbedOperatorKeepsInterfaces(t *testing.T) {
	full := probeOperator(fullOp{}, nopProbe{})
	if fwd, _ := full.(task.EventTimeOperator).ProcessWatermark(1); fwd {
		t.Error("watermark: want the operator's answer")
	}
	if !full.(task.FinalCheckpointOperator).NeedsFinalCheckpoint() {
		t.Error("final checkpoint: want the operator's answer")
	}
	if lc, ok := full.(task.LateCounter); !ok || lc.LateRecordsDropped() != 7 {
		t.Error("late counter lost")
	}
	bare := probeOperator(struct{ task.Operator }{}, nopProbe{})
	if fwd, err := bare.(task.EventTimeOperator).ProcessWatermark(1); !fwd || err != nil {
		t.Error("watermark of an operator without event time must pass on")
	}
	if bare.(task.FinalCheckpointOperator).NeedsFinalCheckpoint() {
		t.Error("no final checkpoint for an operator without one")
	}
	if _, ok := bare.(task.LateCounter); ok {
		t.Error("an operator that counts no late records must not get a counter")
	}
	if err := bare.(task.ProcessingTimeOperator).OnProcessingTime(1); err == nil {
		t.Error("processing time for an operator without it must fail as the task would")
	}
}
