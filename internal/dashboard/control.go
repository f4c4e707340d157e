package dashboard

import (
	"context"
	"errors"
	"time"

	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/metrics"
)

// Control is the running job that the REST API reads and acts on; the job
// master implements it. Every method returns promptly and none waits for
// the job's tasks, except the three actions, which the API calls from a
// goroutine of its own (an operation's) with a context that ends with the
// server.
type Control interface {
	// JobID identifies the job in the API's paths: 32 hex digits.
	JobID() string
	// Status is the job's live status: State is "created", "running",
	// "restarting", "stopping" (a stop with a savepoint in progress),
	// "canceling" (asked to stop, not yet ended), "finished", "failed"
	// or "canceled".
	Status() metrics.Status
	// Options are the job's settings in effect, by name, without secrets.
	Options() map[string]string
	// Checkpoints returns the checkpoint coordinator's statistics; false
	// for a job without checkpointing.
	Checkpoints() (coordinator.Stats, bool)
	// Failures returns the job's latest failures, oldest first.
	Failures() []metrics.Failure
	// SavepointDir resolves the target directory of a savepoint: dir made
	// absolute, or the configured default when dir is empty. Its errors
	// are the request's fault (400) unless they wrap ErrConflict.
	SavepointDir(dir string) (string, error)
	// TriggerSavepoint, StopWithSavepoint and TriggerCheckpoint block
	// until done (see the root package's Job methods of those names);
	// StopWithSavepoint ends the job once its savepoint completed.
	TriggerSavepoint(ctx context.Context, dir string) (string, error)
	StopWithSavepoint(ctx context.Context, dir string) (string, error)
	TriggerCheckpoint(ctx context.Context) (uint64, error)
	// Cancel asks the job to stop; it does not wait.
	Cancel()
	// Workers lists the processes that run the job's tasks with their
	// latest runtime figures: a cluster job's workers, or the job's own
	// process ("local").
	Workers() []metrics.Worker
	// ProfileWorker records a CPU profile of worker id (an ID of
	// Workers) for d (at most MaxWorkerProfile) and returns it in pprof's
	// format; the recording stops when ctx ends. Its errors wrap
	// ErrNoWorker (no such worker: 404), ErrProfileBusy (a profile of
	// that worker's process is being recorded already: 409), ErrConflict
	// (the worker cannot record one: 409) or ErrWorkerGone (the worker
	// left before it answered: 502), or are ctx's.
	ProfileWorker(ctx context.Context, id string, d time.Duration) ([]byte, error)
}

// Errors of Control.ProfileWorker.
var (
	ErrNoWorker   = errors.New("no such worker")
	ErrWorkerGone = errors.New("the worker left before it answered")
)

// ErrConflict marks an error of Control as a conflict with the job's
// state (409): it does not checkpoint, it is not running, it is stopping.
var ErrConflict = errors.New("conflict with the job's state")

// conflict reports whether err is a conflict with the job's state: one
// wrapping ErrConflict, or the coordinator's answer for a job that is
// restarting, stopping or ended.
func conflict(err error) bool {
	return errors.Is(err, ErrConflict) || errors.Is(err, coordinator.ErrNotAttached) ||
		errors.Is(err, coordinator.ErrClosed) || errors.Is(err, coordinator.ErrStopping)
}
