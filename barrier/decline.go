package barrier

import "fmt"

// DeclineReason says why a task declined a checkpoint: the part of Flink's
// CheckpointFailureReason that tasks report. The coordinator uses it to
// tell a checkpoint failure (counted towards the tolerable failures) from
// a checkpoint that simply could not run now (not counted).
type DeclineReason uint8

const (
	// DeclineSnapshotFailed: taking or writing the task's snapshot failed.
	// It counts as a checkpoint failure.
	DeclineSnapshotFailed DeclineReason = iota + 1
	// DeclineTaskNotReady: the task is not running yet (deploying, or
	// restoring its state). Not a failure: the next checkpoint proceeds.
	DeclineTaskNotReady
	// DeclineTaskFinished: the task's input ended and it finished (or is
	// finishing). Not a failure.
	DeclineTaskFinished
	// DeclineTaskCanceled: the task's attempt is being canceled (a
	// failover or the end of the job). Not a failure.
	DeclineTaskCanceled
	// DeclineSubsumed: a barrier of a newer checkpoint arrived before
	// this one was complete. Not a failure.
	DeclineSubsumed
	// DeclineOnCancelMarker: an upstream task gave the checkpoint up and
	// sent a cancel marker. Not a failure (the upstream decline is the one
	// that counts).
	DeclineOnCancelMarker
)

func (r DeclineReason) String() string {
	switch r {
	case DeclineSnapshotFailed:
		return "snapshot failed"
	case DeclineTaskNotReady:
		return "task not ready"
	case DeclineTaskFinished:
		return "task finished"
	case DeclineTaskCanceled:
		return "task canceled"
	case DeclineSubsumed:
		return "subsumed by a newer checkpoint"
	case DeclineOnCancelMarker:
		return "cancel marker received"
	}
	return fmt.Sprintf("DeclineReason(%d)", uint8(r))
}

// Valid reports whether r is one of the defined reasons.
func (r DeclineReason) Valid() bool { return r >= DeclineSnapshotFailed && r <= DeclineOnCancelMarker }

// CountsAsFailure reports whether a checkpoint declined for r counts
// towards the job's tolerable checkpoint failures (as Flink's
// CheckpointFailureManager: only real failures count).
func (r DeclineReason) CountsAsFailure() bool { return r == DeclineSnapshotFailed }

// DeclineReasonOf returns the decline reason for an abort decided by a
// barrier handler.
func DeclineReasonOf(r AbortReason) DeclineReason {
	if r == AbortCancelMarker {
		return DeclineOnCancelMarker
	}
	return DeclineSubsumed
}

// DeclineError is the reason a task gives when it declines a checkpoint.
type DeclineError struct {
	Reason DeclineReason
	Err    error // the cause, or nil
}

func (e *DeclineError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("declined (%v): %v", e.Reason, e.Err)
	}
	return fmt.Sprintf("declined (%v)", e.Reason)
}

func (e *DeclineError) Unwrap() error { return e.Err }

// Decline returns a *DeclineError for reason and cause (which may be nil).
func Decline(reason DeclineReason, cause error) *DeclineError {
	return &DeclineError{Reason: reason, Err: cause}
}
