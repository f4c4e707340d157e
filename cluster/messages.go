package cluster

import (
	"fmt"
	"strings"
	"time"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// Attempt numbers one deployment of the job. The coordinator increments it
// on every (re)deployment; messages of an older attempt are stale and are
// ignored by both sides.
type Attempt uint64

// Epoch numbers a leader of a job whose coordinators fail over (a
// highly available job): every new leader's is greater. Attempts count
// within an epoch. A worker serves the newest epoch that deployed on it
// and refuses a deployment, trigger, notification, cancellation or commit
// of an older one: a deposed leader cannot reach its tasks. Zero: no high
// availability.
type Epoch uint64

// EpochOf returns the epoch of a command; ok is false for messages that
// carry none (Registered, Shutdown, Heartbeat).
func (m *CoordinatorMessage) EpochOf() (e Epoch, ok bool) {
	switch {
	case m.Deploy != nil:
		return m.Deploy.Epoch, true
	case m.CancelAttempt != nil:
		return m.CancelAttempt.Epoch, true
	case m.TriggerCheckpoint != nil:
		return m.TriggerCheckpoint.Epoch, true
	case m.NotifyCheckpoint != nil:
		return m.NotifyCheckpoint.Epoch, true
	case m.Commit != nil:
		return m.Commit.Epoch, true
	}
	return 0, false
}

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
	// Finishing: the task's input ended and it waits for a final
	// checkpoint before it finishes (it is still running).
	Finishing
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
	case Finishing:
		return "finishing"
	}
	return fmt.Sprintf("TaskState(%d)", uint8(s))
}

// WorkerMessage is what a worker sends to the coordinator. Exactly one
// field is set; the coordinator ends the stream of a worker that sends a
// message with none or several set.
type WorkerMessage struct {
	Register   *Register   `json:"Register,omitempty"`
	Heartbeat  *Heartbeat  `json:"Heartbeat,omitempty"`
	TaskStatus *TaskStatus `json:"TaskStatus,omitempty"`
	Ack        *Ack        `json:"Ack,omitempty"`
	Decline    *Decline    `json:"Decline,omitempty"`
	Committed  *Committed  `json:"Committed,omitempty"`
	// Metrics is the periodic report of the worker's tasks' metrics.
	Metrics *MetricsReport `json:"Metrics,omitempty"`
	// Profile answers StartProfile.
	Profile *Profile `json:"Profile,omitempty"`
}

// CoordinatorMessage is what the coordinator sends to a worker. Exactly one
// field is set.
type CoordinatorMessage struct {
	Registered        *Registered        `json:"Registered,omitempty"`
	Deploy            *Deploy            `json:"Deploy,omitempty"`
	CancelAttempt     *CancelAttempt     `json:"CancelAttempt,omitempty"`
	TriggerCheckpoint *TriggerCheckpoint `json:"TriggerCheckpoint,omitempty"`
	NotifyCheckpoint  *NotifyCheckpoint  `json:"NotifyCheckpoint,omitempty"`
	Commit            *Commit            `json:"Commit,omitempty"`
	Shutdown          *Shutdown          `json:"Shutdown,omitempty"`
	Heartbeat         *Heartbeat         `json:"Heartbeat,omitempty"`
	// StartProfile and CancelProfile go only to a worker whose Register
	// listed FeatureProfile: a worker built before them could not decode
	// them and would end its session.
	StartProfile  *StartProfile  `json:"StartProfile,omitempty"`
	CancelProfile *CancelProfile `json:"CancelProfile,omitempty"`
}

// FeatureProfile, in Register.Features: the worker records CPU profiles
// (StartProfile, CancelProfile, Profile).
const FeatureProfile = "profile"

// MaxProfileMillis bounds StartProfile.Millis: a minute.
const MaxProfileMillis = 60_000

// StartProfile asks the worker to record a CPU profile of its process
// (runtime/pprof) for Millis (1..MaxProfileMillis) and to answer with
// Profile. One at a time: a worker already recording one answers with
// Busy. The recording stops early, without an answer, on CancelProfile
// or when the session ends.
type StartProfile struct {
	ID     uint64 `json:"ID"`
	Millis int64  `json:"Millis"`
}

// CancelProfile stops profile ID (its requester went away); the worker
// does not answer.
type CancelProfile struct {
	ID uint64 `json:"ID"`
}

// Profile answers StartProfile ID: Data is the CPU profile in pprof's
// format, or Error says why there is none (Busy: a CPU profile of the
// worker's process was being recorded already).
type Profile struct {
	ID    uint64 `json:"ID"`
	Data  []byte `json:"Data,omitempty"`
	Error string `json:"Error,omitempty"`
	Busy  bool   `json:"Busy,omitempty"`
}

// Register is a worker's first message. The coordinator rejects it if
// Fingerprint differs from its own (the two processes would run different
// job graphs) or if a live worker already has WorkerID.
type Register struct {
	WorkerID    string `json:"WorkerID"`
	DataAddr    string `json:"DataAddr"`    // host:port of the worker's data-plane (TCP buffer) listener
	Fingerprint string `json:"Fingerprint"` // hash of the job graph the worker was built with
	Slots       int    `json:"Slots"`       // tasks the worker offers to run (0: unspecified)
	// Features are the optional messages the worker understands
	// (FeatureProfile); a coordinator sends no other optional message.
	Features []string `json:"Features,omitempty"`
}

// Registered is the coordinator's first message on an accepted stream. The
// Server sends it; Server.Send refuses it.
type Registered struct {
	WorkerID string `json:"WorkerID"`
}

// Heartbeat proves liveness; both sides send one every HeartbeatInterval.
// Neither side hands heartbeats to its handler.
type Heartbeat struct{}

// TaskStatus reports a task's state change within an attempt.
type TaskStatus struct {
	Attempt Attempt       `json:"Attempt"`
	Task    state.TaskKey `json:"Task"`
	State   TaskState     `json:"State"`
	Error   string        `json:"Error"`             // why, when State is Failed
	Metrics *TaskMetrics  `json:"Metrics,omitempty"` // the task's metrics, once it ended
	// NonRecoverable: the failure is one no restart mends (a restore
	// refused for the state it holds); the job fails without restarting.
	NonRecoverable bool `json:"NonRecoverable,omitempty"`
	// Codes name the registered errors (internal/errcode) that the
	// task's error matched on the worker: the coordinator's error matches
	// them again with errors.Is. A coordinator ignores codes it does not
	// know.
	Codes []string `json:"Codes,omitempty"`
}

// TaskMetrics is the wire form of a task's task.Metrics, in TaskStatus.
// The control plane owns it, so a change to task.Metrics does not change
// the wire: TaskMetricsFrom and ToTask convert.
type TaskMetrics struct {
	Name               string `json:"Name"`
	RecordsIn          int64  `json:"RecordsIn"`
	RecordsOut         int64  `json:"RecordsOut"`
	BytesIn            int64  `json:"BytesIn"`
	BytesOut           int64  `json:"BytesOut"`
	BusyNanos          int64  `json:"BusyNanos"`
	IdleNanos          int64  `json:"IdleNanos"`
	BackPressuredNanos int64  `json:"BackPressuredNanos"`
}

// TaskMetricsFrom returns the wire form of m.
func TaskMetricsFrom(m task.Metrics) TaskMetrics {
	return TaskMetrics{
		Name:               m.Name,
		RecordsIn:          m.RecordsIn,
		RecordsOut:         m.RecordsOut,
		BytesIn:            m.BytesIn,
		BytesOut:           m.BytesOut,
		BusyNanos:          int64(m.Busy),
		IdleNanos:          int64(m.Idle),
		BackPressuredNanos: int64(m.BackPressured),
	}
}

// ToTask returns the task.Metrics m describes.
func (m TaskMetrics) ToTask() task.Metrics {
	return task.Metrics{
		Name:          m.Name,
		RecordsIn:     m.RecordsIn,
		RecordsOut:    m.RecordsOut,
		BytesIn:       m.BytesIn,
		BytesOut:      m.BytesOut,
		Busy:          time.Duration(m.BusyNanos),
		Idle:          time.Duration(m.IdleNanos),
		BackPressured: time.Duration(m.BackPressuredNanos),
	}
}

// Ack acknowledges checkpoint ID for Task: the task's snapshot and its
// metrics, for coordinator.CheckpointCoordinator.Acknowledge.
type Ack struct {
	Attempt Attempt              `json:"Attempt"`
	Task    state.TaskKey        `json:"Task"`
	ID      barrier.CheckpointID `json:"ID"`
	// Snapshot is state.EncodeTaskSnapshot of the task's snapshot (decode
	// it with state.DecodeTaskSnapshot): the state package owns and
	// versions that format.
	Snapshot []byte            `json:"Snapshot"`
	Metrics  CheckpointMetrics `json:"Metrics"`
}

// CheckpointMetrics is the wire form of coordinator.TaskCheckpointMetrics,
// in Ack. The control plane owns it: CheckpointMetricsFrom and
// ToCoordinator convert.
type CheckpointMetrics struct {
	AlignmentNanos                int64 `json:"AlignmentNanos"`
	StartDelayNanos               int64 `json:"StartDelayNanos"`
	SyncNanos                     int64 `json:"SyncNanos"`
	AsyncNanos                    int64 `json:"AsyncNanos"`
	StateSizeBytes                int64 `json:"StateSizeBytes"`
	BytesProcessedDuringAlignment int64 `json:"BytesProcessedDuringAlignment"`
}

// CheckpointMetricsFrom returns the wire form of m.
func CheckpointMetricsFrom(m coordinator.TaskCheckpointMetrics) CheckpointMetrics {
	return CheckpointMetrics{
		AlignmentNanos:                int64(m.AlignmentDuration),
		StartDelayNanos:               int64(m.StartDelay),
		SyncNanos:                     int64(m.SyncDuration),
		AsyncNanos:                    int64(m.AsyncDuration),
		StateSizeBytes:                m.StateSize,
		BytesProcessedDuringAlignment: m.BytesProcessedDuringAlignment,
	}
}

// ToCoordinator returns the coordinator.TaskCheckpointMetrics m describes.
func (m CheckpointMetrics) ToCoordinator() coordinator.TaskCheckpointMetrics {
	return coordinator.TaskCheckpointMetrics{
		AlignmentDuration:             time.Duration(m.AlignmentNanos),
		StartDelay:                    time.Duration(m.StartDelayNanos),
		SyncDuration:                  time.Duration(m.SyncNanos),
		AsyncDuration:                 time.Duration(m.AsyncNanos),
		StateSize:                     m.StateSizeBytes,
		BytesProcessedDuringAlignment: m.BytesProcessedDuringAlignment,
	}
}

// Decline says Task could not take checkpoint ID, for
// coordinator.CheckpointCoordinator.Decline.
type Decline struct {
	Attempt Attempt              `json:"Attempt"`
	Task    state.TaskKey        `json:"Task"`
	ID      barrier.CheckpointID `json:"ID"`
	// Kind classifies the decline (see barrier.DeclineReason); zero for
	// an unclassified one, which counts as a checkpoint failure.
	Kind   barrier.DeclineReason `json:"Kind,omitempty"`
	Reason string                `json:"Reason"`
}

// Assignment places one task on one worker.
type Assignment struct {
	Task     state.TaskKey `json:"Task"`
	WorkerID string        `json:"WorkerID"`
}

// Deploy starts attempt Attempt: every worker receives the whole placement
// and runs the tasks assigned to it, connecting their data channels to the
// other workers' DataAddrs.
type Deploy struct {
	Attempt Attempt `json:"Attempt"`
	// Epoch is the deploying leader's epoch (0: a coordinator without
	// high availability). A worker refuses commands of an epoch older than
	// the newest it deployed; see Epoch.
	Epoch     Epoch             `json:"Epoch,omitempty"`
	JobID     string            `json:"JobID"`
	Tasks     []Assignment      `json:"Tasks"`
	DataAddrs map[string]string `json:"DataAddrs"` // worker ID → data-plane address
	Restore   []byte            `json:"Restore"`   // state.EncodeMetadata of the checkpoint to restore; nil: none
	// RestoreFrom is where the worker opens the storage that holds
	// Restore's files (with Restore).
	RestoreFrom *StorageLocation `json:"RestoreFrom,omitempty"`
	// Checkpoints is where the worker opens the job's checkpoint storage,
	// which its tasks write this attempt's checkpoints to.
	Checkpoints StorageLocation `json:"Checkpoints"`
	Mode        barrier.Mode    `json:"Mode"` // the checkpointing mode
	// Alignment and AlignmentTimeoutMillis say how exactly-once
	// checkpoints align (task.CheckpointConfig); absent: aligned.
	Alignment              barrier.Alignment `json:"Alignment,omitempty"`
	AlignmentTimeoutMillis int64             `json:"AlignmentTimeoutMillis,omitempty"`
}

// StorageLocation names checkpoint storage that a worker opens itself
// (state.Location): credentials come from the worker's own environment.
type StorageLocation struct {
	// Root is a directory every process mounts, or a URL
	// ("s3://bucket/prefix").
	Root string `json:"Root"`
	// JobID is the job whose place under Root the storage is ("": Root
	// itself).
	JobID string `json:"JobID,omitempty"`
}

// CancelAttempt stops every task of Attempt on the worker (after a failure
// elsewhere, before a redeployment).
type CancelAttempt struct {
	Attempt Attempt `json:"Attempt"`
	Epoch   Epoch   `json:"Epoch,omitempty"`
}

// TriggerCheckpoint starts a checkpoint at a source task, for
// coordinator.TaskGateway.TriggerCheckpoint.
type TriggerCheckpoint struct {
	Attempt Attempt         `json:"Attempt"`
	Epoch   Epoch           `json:"Epoch,omitempty"`
	Task    state.TaskKey   `json:"Task"`
	Barrier barrier.Barrier `json:"Barrier"`
}

// NotifyCheckpoint tells a task that checkpoint ID completed (Aborted
// false) or was aborted, for coordinator.TaskGateway's notifications.
type NotifyCheckpoint struct {
	Attempt Attempt              `json:"Attempt"`
	Epoch   Epoch                `json:"Epoch,omitempty"`
	Task    state.TaskKey        `json:"Task"`
	ID      barrier.CheckpointID `json:"ID"`
	Aborted bool                 `json:"Aborted"`
}

// Commit ends Attempt, whose tasks have all ended, for the sinks that
// finished on the worker: their remaining transactions are committed
// (Commit true: the job finished) or aborted, except that transactions of
// checkpoints up to Completed are committed all the same (their restore
// would commit them). The worker answers with Committed.
type Commit struct {
	Attempt   Attempt              `json:"Attempt"`
	Epoch     Epoch                `json:"Epoch,omitempty"`
	Commit    bool                 `json:"Commit"`
	Completed barrier.CheckpointID `json:"Completed"`
}

// Committed answers Commit; Error says what failed.
type Committed struct {
	Attempt Attempt `json:"Attempt"`
	Error   string  `json:"Error"`
}

// Shutdown tells a worker to stop: RunWorker returns nil after handing it
// to the WorkerHandler. The coordinator ends the worker's stream after
// sending it and drops messages sent to that worker afterwards.
type Shutdown struct {
	Reason string `json:"Reason"`
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
		field{"Metrics", m.Metrics != nil},
		field{"Profile", m.Profile != nil},
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
		field{"StartProfile", m.StartProfile != nil},
		field{"CancelProfile", m.CancelProfile != nil},
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
