package weir

import (
	"errors"
	"fmt"
	"time"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/deploy"
	"github.com/weirstream/weir/state"
)

// Checkpointing guarantees.
const (
	ExactlyOnce = barrier.ExactlyOnce
	AtLeastOnce = barrier.AtLeastOnce
)

// CheckpointConfig turns on periodic checkpoints. Zero values mean Flink's
// defaults (see coordinator.Config).
type CheckpointConfig struct {
	Interval          time.Duration // required: how often to checkpoint
	Mode              barrier.Mode  // ExactlyOnce (default) or AtLeastOnce
	MinPause          time.Duration
	Timeout           time.Duration // default 10 min
	MaxConcurrent     int           // default 1
	TolerableFailures int           // consecutive failed checkpoints tolerated (default 0)
	Retained          int           // completed checkpoints kept (default 1)
	RetainOnCancel    bool
	// Unaligned makes exactly-once checkpoints unaligned (Flink's
	// execution.checkpointing.unaligned): barriers overtake the data in
	// flight between tasks, which is written into the checkpoint as
	// channel state, so a checkpoint does not wait for a back-pressured
	// job to drain. It costs checkpoint size (the in-flight data, at most
	// the network buffers of the job) and a copy of each recorded buffer
	// while a checkpoint is pending; an unaligned checkpoint restores only
	// at the parallelism it was taken at. Savepoints are always aligned.
	Unaligned bool
	// AlignedTimeout, with Unaligned, starts every checkpoint aligned and
	// switches it to unaligned once its alignment has taken this long,
	// counted from the checkpoint's start (Flink's
	// execution.checkpointing.aligned-checkpoint-timeout): checkpoints of
	// a job that is not back-pressured stay aligned and small. 0 (the
	// default): unaligned from the start. It counts in whole milliseconds;
	// a positive timeout below 1 ms starts aligned and switches as soon as
	// the alignment starts.
	AlignedTimeout time.Duration
	// ForceUnaligned, with Unaligned, also lets the barriers of pointwise
	// (forward) and broadcast exchanges between tasks overtake (Flink's
	// execution.checkpointing.unaligned.forced). Without it their barriers
	// travel in band, as in Flink: the producer's queue of such an
	// exchange is never overtaken, so a checkpoint waits for that queue to
	// reach the consumer (which records what arrives before the barrier
	// once its checkpoint went unaligned).
	ForceUnaligned bool
	// Dir is the checkpoint directory, or an object store's URL
	// ("s3://bucket/prefix": endpoint, region and credentials from the
	// AWS_* environment; see package state/s3); empty keeps checkpoints in
	// a private directory removed with the job. Storage, when set,
	// overrides Dir.
	Dir     string
	Storage state.Storage
	// SavepointDir is where a savepoint goes when none is given
	// (Job.TriggerSavepoint and StopWithSavepoint with "", the REST API's
	// POST /jobs/{jobid}/savepoints without target-directory): Flink's
	// state.savepoints.dir. Empty: a directory must be given.
	SavepointDir string
}

// CheckpointStats are the coordinator's checkpoint statistics.
type CheckpointStats = coordinator.Stats

func (c *CheckpointConfig) coordinatorConfig() coordinator.Config {
	return coordinator.Config{Interval: c.Interval, Mode: c.Mode, MinPause: c.MinPause, Timeout: c.Timeout,
		MaxConcurrent: c.MaxConcurrent, TolerableFailures: c.TolerableFailures, Retained: c.Retained, RetainOnCancel: c.RetainOnCancel,
		Unaligned: c.Unaligned, AlignedTimeout: c.AlignedTimeout}
}

func (c *CheckpointConfig) validate() error {
	if c.Interval <= 0 {
		return fmt.Errorf("weir: checkpoint interval %v must be positive", c.Interval)
	}
	if c.ForceUnaligned && !c.Unaligned {
		return errors.New("weir: ForceUnaligned needs Unaligned")
	}
	if err := c.coordinatorConfig().Validate(); err != nil {
		return fmt.Errorf("weir: %w", err)
	}
	return nil
}

// WithCheckpointing turns on periodic checkpoints: a failed job restarts
// from its latest completed checkpoint (see WithRestartStrategy).
func WithCheckpointing(c CheckpointConfig) Option {
	return optionFunc(func(cfg *config) { cfg.ckpt = &c })
}

// WithRestoreFrom starts the job from a savepoint (the path
// Job.TriggerSavepoint returned), a retained checkpoint (a chk-N directory)
// or the newest valid checkpoint of a checkpoint directory. Each
// operator's state goes to the operator with the same ID (its UID, see
// Stream.UID), wherever it now runs; sources resume from their saved
// positions. State of an operator the job does not have fails the start
// with ErrNonRestoredState (see WithAllowNonRestoredState). It needs
// WithCheckpointing. The restore point is only read: retention never
// deletes it unless it lies in the job's own checkpoint directory.
// or the newest valid checkpoint of a job's checkpoint directory
// (Dir/<job-id>), or of a checkpoint directory (Dir) that holds one job's
// checkpoints (several jobs' are an error that lists them). Checkpoints
// that do not verify (a file corrupt, missing, or of another checkpoint)
// are skipped with a log line saying why; a chk-N that does not verify is
// an error naming the file. Operators are
// matched by their UIDs (see Stream.UID); sources resume from their saved
// positions. It needs WithCheckpointing. The restore point is only read:
// retention never deletes it unless it lies in the job's own checkpoint
// directory.
func WithRestoreFrom(path string) Option {
	return optionFunc(func(cfg *config) { cfg.restoreFrom = path })
}

// WithAllowNonRestoredState(true) lets a job start from a restore point
// (WithRestoreFrom) that holds state of operators the job does not have
// (an operator removed, or one whose ID changed): that state is dropped,
// and each operator whose state is dropped is logged. Without it such a
// start fails with ErrNonRestoredState (Flink's --allowNonRestoredState).
func WithAllowNonRestoredState(allow bool) Option {
	return optionFunc(func(cfg *config) { cfg.allowNonRestored = allow })
}

// ErrOperatorKindChanged is wrapped by the error of a job whose restore
// point holds, under the ID of one of its operators, the state of an
// operator of another kind (a Reduce's UID given to a window): that state
// would mean something else to it, so the job does not start.
var ErrOperatorKindChanged = deploy.ErrOperatorKindChanged

// ErrNonRestoredState is wrapped by the error of a job whose restore
// point holds state of operators it does not have; the error names them.
var ErrNonRestoredState = deploy.ErrNonRestoredState

// ErrFinishedMixed is wrapped by the error of a job whose restore point
// records some operators of one of its tasks as finished (FLIP-147: a
// source that had reached its end, and what ran only on its input) and
// others as running: a task runs either finished or from the start, and
// neither is right for both. The error names the two operators; chain
// them as they were, or restore from a savepoint taken before the
// operator finished.
var ErrFinishedMixed = deploy.ErrFinishedMixed

// WithJobID names the job: its checkpoints go to its own place in the
// checkpoint directory, CheckpointConfig.Dir/<id>/chk-N, and the ID is
// recorded in every checkpoint's metadata and state files. Without it, a
// job restored (WithRestoreFrom) from a checkpoint in its own Dir keeps
// that checkpoint's job ID, and any other job gets a new random one, so two
// jobs on one Dir never mix their checkpoints. Only one running job may
// use a place at a time: Execute fails while another holds its lock. The
// ID is 1 to 128 letters, digits, '-', '_' or '.' (state.ValidJobID). With
// CheckpointConfig.Storage the storage decides where checkpoints go.
func WithJobID(id string) Option {
	return optionFunc(func(cfg *config) { cfg.jobID = id })
}
