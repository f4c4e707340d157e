package cluster

import (
	"fmt"
	"strings"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// Attempt numbers one deployment of the job. The coordinator increments it
// on every (re)deployment; messages of an older attempt are stale and are
// ignored by both sides.
type Attempt uint64

// TaskState is the lifecycle state a worker reports for one task.
type TaskState uint8

const (
	// Running: the task is deployed and processing.
	Running TaskState = iota + 1
	// Finished: the task ended normally (its input ended).
	Finished
	// Failed: the task ended with an error (TaskStatus.Error says which).
	Failed
	// Canceled: the task stopped because its attempt was canceled.
	Canceled
)

func (s TaskState) String() string {
	switch s {
	case Running:
		return "running"
	case Finished:
		return "finished"
	case Failed:
		return "failed"
	case Canceled:
		return "canceled"
	}
	return fmt.Sprintf("TaskState(%d)", uint8(s))
}

// WorkerMessage is what a worker sends to the coordinator. Exactly one
// field is set; the coordinator ends the stream of a worker that sends a
// message with none or several set.
type WorkerMessage struct {
	Register   *Register   `json:",omitempty"`
	Heartbeat  *Heartbeat  `json:",omitempty"`
	TaskStatus *TaskStatus `json:",omitempty"`
	Ack        *Ack        `json:",omitempty"`
	Decline    *Decline    `json:",omitempty"`
	Committed  *Committed  `json:",omitempty"`
}

// CoordinatorMessage is what the coordinator sends to a worker. Exactly one
// field is set.
type CoordinatorMessage struct {
	Registered        *Registered        `json:",omitempty"`
	Deploy            *Deploy            `json:",omitempty"`
	CancelAttempt     *CancelAttempt     `json:",omitempty"`
	TriggerCheckpoint *TriggerCheckpoint `json:",omitempty"`
	NotifyCheckpoint  *NotifyCheckpoint  `json:",omitempty"`
	Commit            *Commit            `json:",omitempty"`
	Shutdown          *Shutdown          `json:",omitempty"`
	Heartbeat         *Heartbeat         `json:",omitempty"`
}

// Register is a worker's first message. The coordinator rejects it if
// Fingerprint differs from its own (the two processes would run different
// job graphs) or if a live worker already has WorkerID.
type Register struct {
	WorkerID    string
	DataAddr    string // host:port of the worker's data-plane (TCP buffer) listener
	Fingerprint string // hash of the job graph the worker was built with
	Slots       int    // tasks the worker offers to run (0: unspecified)
}

// Registered is the coordinator's first message on an accepted stream. The
// Server sends it; Server.Send refuses it.
type Registered struct {
	WorkerID string
}

// Heartbeat proves liveness; both sides send one every HeartbeatInterval.
// Neither side hands heartbeats to its handler.
type Heartbeat struct{}

// TaskStatus reports a task's state change within an attempt.
type TaskStatus struct {
	Attempt Attempt
	Task    state.TaskKey
	State   TaskState
	Error   string        // why, when State is Failed
	Metrics *task.Metrics `json:",omitempty"` // the task's metrics, once it ended
}

// Ack acknowledges checkpoint ID for Task: the task's snapshot and its
// metrics, for coordinator.CheckpointCoordinator.Acknowledge.
type Ack struct {
	Attempt  Attempt
	Task     state.TaskKey
	ID       barrier.CheckpointID
	Snapshot state.TaskSnapshot
	Metrics  coordinator.TaskCheckpointMetrics
}

// Decline says Task could not take checkpoint ID, for
// coordinator.CheckpointCoordinator.Decline.
type Decline struct {
	Attempt Attempt
	Task    state.TaskKey
	ID      barrier.CheckpointID
	// Kind classifies the decline (see barrier.DeclineReason); zero for
	// an unclassified one, which counts as a checkpoint failure.
	Kind   barrier.DeclineReason `json:",omitempty"`
	Reason string
}

// Assignment places one task on one worker.
type Assignment struct {
	Task     state.TaskKey
	WorkerID string
}

// Deploy starts attempt Attempt: every worker receives the whole placement
// and runs the tasks assigned to it, connecting their data channels to the
// other workers' DataAddrs.
type Deploy struct {
	Attempt       Attempt
	JobID         string
	Tasks         []Assignment
	DataAddrs     map[string]string // worker ID → data-plane address
	Restore       []byte            // state.EncodeMetadata of the checkpoint to restore; nil: none
	RestoreDir    string            // the restored checkpoint's directory
	CheckpointDir string            // where tasks write this attempt's checkpoints
	Mode          barrier.Mode      // the checkpointing mode
}

// CancelAttempt stops every task of Attempt on the worker (after a failure
// elsewhere, before a redeployment).
type CancelAttempt struct {
	Attempt Attempt
}

// TriggerCheckpoint starts a checkpoint at a source task, for
// coordinator.TaskGateway.TriggerCheckpoint.
type TriggerCheckpoint struct {
	Attempt Attempt
	Task    state.TaskKey
	Barrier barrier.Barrier
}

// NotifyCheckpoint tells a task that checkpoint ID completed (Aborted
// false) or was aborted, for coordinator.TaskGateway's notifications.
type NotifyCheckpoint struct {
	Attempt Attempt
	Task    state.TaskKey
	ID      barrier.CheckpointID
	Aborted bool
}

// Commit ends Attempt, whose tasks have all ended, for the sinks that
// finished on the worker: their remaining transactions are committed
// (Commit true: the job finished) or aborted, except that transactions of
// checkpoints up to Completed are committed all the same (their restore
// would commit them). The worker answers with Committed.
type Commit struct {
	Attempt   Attempt
	Commit    bool
	Completed barrier.CheckpointID
}

// Committed answers Commit; Error says what failed.
type Committed struct {
	Attempt Attempt
	Error   string
}

// Shutdown tells a worker to stop: RunWorker returns nil after handing it
// to the WorkerHandler. The coordinator ends the worker's stream after
// sending it and drops messages sent to that worker afterwards.
type Shutdown struct {
	Reason string
}

// kind names the single field set in m, or says why m is malformed.
func (m *WorkerMessage) kind() (string, error) {
	return oneOf(
		field{"Register", m.Register != nil},
		field{"Heartbeat", m.Heartbeat != nil},
		field{"TaskStatus", m.TaskStatus != nil},
		field{"Ack", m.Ack != nil},
		field{"Decline", m.Decline != nil},
		field{"Committed", m.Committed != nil},
	)
}

// kind names the single field set in m, or says why m is malformed.
func (m *CoordinatorMessage) kind() (string, error) {
	return oneOf(
		field{"Registered", m.Registered != nil},
		field{"Deploy", m.Deploy != nil},
		field{"CancelAttempt", m.CancelAttempt != nil},
		field{"TriggerCheckpoint", m.TriggerCheckpoint != nil},
		field{"NotifyCheckpoint", m.NotifyCheckpoint != nil},
		field{"Commit", m.Commit != nil},
		field{"Shutdown", m.Shutdown != nil},
		field{"Heartbeat", m.Heartbeat != nil},
	)
}

type field struct {
	name string
	set  bool
}

func oneOf(fs ...field) (string, error) {
	var set []string
	for _, f := range fs {
		if f.set {
			set = append(set, f.name)
		}
	}
	switch len(set) {
	case 1:
		return set[0], nil
	case 0:
		return "", fmt.Errorf("%w: no field set", ErrMalformed)
	}
	return "", fmt.Errorf("%w: %d fields set (%s), want exactly one", ErrMalformed, len(set), strings.Join(set, ", "))
}
