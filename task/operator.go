package task

import (
	"context"
	"iter"

	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

// Operator is one step of a task's chain, as the task sees it: lifecycle and
// checkpoint hooks. Records flow between chained operators by direct calls
// set up when the chain is built (the root package builds typed chains);
// the task only calls these hooks, always from its own goroutine.
type Operator interface {
	// ID is the operator's stable identity: its state is stored under it.
	ID() string
	// Name is the operator's name for logs and errors.
	Name() string
	// Keyed reports whether the operator uses keyed state: the task then
	// gives it a keyed backend for the subtask's key groups.
	Keyed() bool
	// Open prepares the operator, restoring its state from ctx when the
	// task starts from a checkpoint.
	Open(ctx *OperatorContext) error
	// Finish is called once all input has ended, before the task emits end
	// of partition: an operator flushes what it buffered.
	Finish() error
	// Close releases the operator's resources. It is called once, also
	// when the task fails.
	Close() error
	// PrepareSnapshotPreBarrier runs before the barrier of checkpoint id
	// is forwarded: an operator may emit what it buffered.
	PrepareSnapshotPreBarrier(id barrier.CheckpointID) error
	// SnapshotState writes the operator's state for checkpoint id into its
	// state backends (ctx's keyed and operator backends).
	SnapshotState(id barrier.CheckpointID) error
	// NotifyCheckpointComplete tells the operator checkpoint id completed
	// (two-phase-commit sinks commit here).
	NotifyCheckpointComplete(id barrier.CheckpointID) error
	// NotifyCheckpointAborted tells the operator checkpoint id was aborted.
	NotifyCheckpointAborted(id barrier.CheckpointID) error
}

// KindedOperator is implemented by an operator that names its kind (the
// name its API gave it: "reduce", "file sink"), which its snapshots record
// (state.OperatorSubtaskState.Kind): a restore hands an operator's state
// only to an operator of the same kind.
type KindedOperator interface {
	Operator
	Kind() string
}

// OperatorContext is what an operator gets at Open.
type OperatorContext struct {
	TaskName string
	Logger   *zap.Logger // the task's
	// ExactlyOnce reports that the task takes exactly-once checkpoints.
	ExactlyOnce bool
	// Checkpointing reports that the task takes checkpoints.
	Checkpointing  bool
	Subtask        int
	Parallelism    int
	MaxParallelism int
	KeyGroups      keygroup.Range
	// Keyed is the operator's keyed state backend (nil for non-keyed
	// operators), already restored.
	Keyed state.KeyedBackend
	// OperatorState is the operator's operator-state backend, restored.
	OperatorState *state.OperatorBackend
	// Restored reports whether the task started from a checkpoint.
	Restored bool
	// RestoredID is the checkpoint the task started from (0 if none).
	RestoredID barrier.CheckpointID
	// Context is done when the task is canceled (the job is canceled or
	// restarts), not when it finishes: an operator bounds its calls to
	// other systems with it (a sink's commit), also in Close.
	Context context.Context

	t     *Task // the task, for EmitWatermark and processing time
	index int   // the operator's position in the chain
}

// RecordProcessor is the head of a non-source task's chain: it decodes a
// serialized record and pushes it through the chain.
type RecordProcessor interface {
	ProcessRecord(rec []byte) error
}

// Prefetcher is a RecordProcessor that prepares for the records of a
// buffer before it processes them one by one: a keyed operator whose
// state backend reads from disk loads the state of the buffer's keys in
// one pass (in key order) rather than one random read per record. The
// task calls Prefetch with each data buffer it starts, records is the
// buffer's whole records (which ProcessRecord then gets, in order).
// Prefetch must change no result: it may only warm caches. An error fails
// the task.
type Prefetcher interface {
	RecordProcessor
	Prefetch(records iter.Seq[[]byte]) error
}

// SourceStatus is what one poll of a source reports.
type SourceStatus uint8

const (
	// MoreAvailable: poll again right away.
	MoreAvailable SourceStatus = iota
	// NothingAvailable: wait on Source.Available before polling again.
	NothingAvailable
	// EndOfInput: the source is exhausted.
	EndOfInput
)

// Source is the head of a source task's chain: a reader the task pulls in
// its mailbox loop, so that checkpoint barriers are injected between
// records, never inside one. PollNext emits at most a few records into the
// chain.
type Source interface {
	PollNext() (SourceStatus, error)
	// Available returns a channel that is closed once PollNext may return
	// more; called after NothingAvailable.
	Available() <-chan struct{}
}
