package coordinator

import (
	"errors"
	"fmt"

	"github.com/weirstream/weir/barrier"
)

// Sentinels. A failed checkpoint is reported as a *CheckpointError whose
// Reason is one of the reason sentinels below, so errors.Is classifies it.
var (
	// ErrClosed is returned by calls made after Close or Shutdown.
	ErrClosed = errors.New("coordinator: closed")
	// ErrRunning is returned by Run when the coordinator is already running.
	ErrRunning = errors.New("coordinator: already running")
	// ErrNotAttached is returned when a checkpoint is requested while no
	// job attempt is attached.
	ErrNotAttached = errors.New("coordinator: no job attempt attached")
	// ErrAttached is returned by Attach and Restore while an attempt is
	// attached.
	ErrAttached = errors.New("coordinator: job attempt already attached")
	// ErrStopping is returned by StopWithSavepoint while the job is
	// already stopping at another savepoint.
	ErrStopping = errors.New("coordinator: the job is already stopping with a savepoint")
	// ErrTooManyFailures is the job failure reported when consecutive
	// failed checkpoints exceed Config.TolerableFailures.
	ErrTooManyFailures = errors.New("coordinator: exceeded tolerable checkpoint failures")

	// ErrDeclined: a task declined the checkpoint. It counts as a failure
	// unless the task's *barrier.DeclineError says it could not run now
	// (not ready, finished, canceled, subsumed, canceled upstream).
	ErrDeclined = errors.New("coordinator: checkpoint declined")
	// ErrExpired: the checkpoint timed out (counts as a failure).
	ErrExpired = errors.New("coordinator: checkpoint expired")
	// ErrFinalize: the metadata (or savepoint) could not be written
	// (counts as a failure).
	ErrFinalize = errors.New("coordinator: checkpoint finalization failed")
	// ErrTriggerFailed: a source task could not be triggered.
	ErrTriggerFailed = errors.New("coordinator: checkpoint trigger failed")
	// ErrSubsumed: a newer checkpoint completed first.
	ErrSubsumed = errors.New("coordinator: checkpoint subsumed")
	// ErrDetached: the job attempt was detached (failover or end of job).
	ErrDetached = errors.New("coordinator: job attempt detached")
	// ErrJobFinished: the job's attempt finished (every task ended
	// without failure) while the checkpoint was pending: it is aborted by
	// the job's end, not failed (it does not count as a failure, and the
	// statistics count it as Aborted, as Flink does not count a
	// checkpoint aborted by a finished job).
	ErrJobFinished = errors.New("coordinator: checkpoint aborted: the job finished")
	// ErrJobCanceled is the reason to give Detach when the attempt ended
	// because its job was canceled (Job.Cancel, the job's context): the
	// pending checkpoints are aborted as after a failure, and the log says
	// what happened.
	ErrJobCanceled = errors.New("coordinator: the job was canceled")
	// ErrAllFinished: every task of the attempt finished: there is
	// nothing left to checkpoint (does not count as a failure).
	ErrAllFinished = errors.New("coordinator: every task finished")
)

// CheckpointError reports why one checkpoint or savepoint failed.
// errors.Is matches both Reason and Err.
type CheckpointError struct {
	ID     barrier.CheckpointID // 0 if the request never got an ID
	Kind   barrier.Kind
	Reason error // one of the reason sentinels
	Err    error // the underlying cause, or nil
}

func (e *CheckpointError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%v %d: %v: %v", e.Kind, e.ID, e.Reason, e.Err)
	}
	return fmt.Sprintf("%v %d: %v", e.Kind, e.ID, e.Reason)
}

// Unwrap returns the reason and the cause.
func (e *CheckpointError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Err}
}

// counts reports whether the failure counts towards TolerableFailures.
func (e *CheckpointError) counts() bool {
	if e.Kind == barrier.Savepoint {
		return false
	}
	switch e.Reason {
	case ErrDeclined:
		var de *barrier.DeclineError
		if errors.As(e.Err, &de) {
			return de.Reason.CountsAsFailure()
		}
		return true
	case ErrExpired, ErrFinalize:
		return true
	}
	return false
}
