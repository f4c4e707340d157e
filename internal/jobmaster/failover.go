package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/deploy"
	"github.com/weirstream/weir/internal/metrics"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// An attempt is one deployment of every task of the job: in this process,
// or spread over worker processes.
type attempt interface {
	// taskKeys lists the attempt's tasks: sources receive checkpoint
	// triggers, all acknowledge.
	taskKeys() (sources, all []state.TaskKey)
	// gateway reaches the attempt's tasks for the coordinator.
	gateway() coordinator.TaskGateway
	// run runs the tasks until all finished, one failed, or ctx ended;
	// ended is called whenever a task returned, with its error (nil: it
	// finished), and when the attempt fails as a whole.
	run(ctx context.Context, ended func(error)) error
	// resolveFinal commits (commit) or aborts the transactions of sinks
	// that finished; after a failure, those of checkpoints up to
	// completed are committed all the same.
	resolveFinal(commit bool, completed barrier.CheckpointID) error
	// metrics are the tasks' metrics once run returned.
	metrics() []task.Metrics
	// samples reads the tasks' live metrics, from any goroutine, without
	// waiting for them.
	samples() []metrics.TaskSample
}

// startAttempt deploys attempt number n of the job from restore (nil: from
// scratch).
type startAttempt func(ctx context.Context, n int, restore *deploy.RestorePoint) (attempt, error)

// failover runs a checkpointed job attempt by attempt: each failure
// restarts every task from the latest completed checkpoint, as long as the
// restart strategy allows (Flink's restart-all failover strategy).
type failover struct {
	ck      *checkpointing
	start   startAttempt
	restart coordinator.RestartStrategy
	log     *zap.Logger
	status  *jobStatus // nil: not tracked
	// upstream is the job's topology for the coordinator (nil: unknown).
	upstream map[state.TaskKey][]state.TaskKey
	// operators are the operators of each vertex, for the coordinator.
	operators map[string][]coordinator.Operator
}

// run runs the job to its end. The coordinator runs for as long; it is
// shut down with the job's final status, and res gets the restarts, the
// last attempt's task metrics and the checkpoint statistics.
func (f *failover) run(ctx context.Context, res *Result) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	coord := f.ck.coord

	var wg sync.WaitGroup
	wg.Go(func() { _ = coord.Run(ctx) })
	defer func() {
		cancel(nil)
		wg.Wait()
		coord.Close()
		stats := coord.Stats()
		res.Checkpoints = &stats
	}()

	for {
		rp := f.ck.restorePointFor()
		a, err := f.start(ctx, res.Restarts, rp)
		if err != nil {
			f.shutdown(coordinator.JobFailed)
			return err
		}
		f.status.attemptStarted(res.Restarts, rp != nil, a.samples)
		err = f.runAttempt(ctx, a)
		res.Tasks = a.metrics()
		if err == nil {
			if cerr := a.resolveFinal(true, 0); cerr != nil {
				f.shutdown(coordinator.JobFailed)
				return fmt.Errorf("weir: final commit: %w", cerr)
			}
			f.shutdown(coordinator.JobFinished)
			return nil
		}
		var upTo barrier.CheckpointID
		if m, ok := coord.LatestCompleted(); ok {
			upTo = m.ID
		}
		if cerr := a.resolveFinal(false, upTo); cerr != nil {
			// The transactions of completed checkpoints are committed
			// again on restore; the others are left to their sinks'
			// timeouts.
			f.log.Warn("settling finished sinks' transactions after a failure", zap.Error(cerr))
		}
		if ctx.Err() != nil {
			f.shutdown(coordinator.JobCanceled)
			return err
		}
		if nonRecoverable(err) {
			f.shutdown(coordinator.JobFailed)
			return fmt.Errorf("weir: job failed and will not restart (a restart would restore the same state and fail the same way): %w", err)
		}
		delay, ok := f.restart.Next(time.Now())
		if !ok {
			f.shutdown(coordinator.JobFailed)
			return fmt.Errorf("weir: job failed and will not restart: %w", err)
		}
		f.log.Warn("job failed; restarting from the latest checkpoint", zap.Error(err), zap.Duration("delay", delay))
		f.status.attemptFailed(err, true)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			f.shutdown(coordinator.JobCanceled)
			return err
		}
		res.Restarts++
		f.status.restarted()
	}
}

// nonRecoverable reports whether err is a failure that no restart can
// mend, whatever the restart strategy (Flink's non-recoverable errors): a
// restore point whose state the job refuses (a state's type changed, an
// operator of another kind under its ID, …). A restart restores the same
// point, or a later one that carries the same state, and fails the same
// way: the job fails at once with the error.
func nonRecoverable(err error) bool {
	for _, target := range []error{state.ErrIncompatibleState, deploy.ErrOperatorKindChanged, deploy.ErrNonRestoredState, deploy.ErrFinishedMixed} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// shutdown shuts the coordinator down with the job's final status. It
// fails only if the coordinator was closed already (nothing is lost
// then, but it should not happen): logged, as the job's own outcome is
// what the caller returns.
func (f *failover) shutdown(status coordinator.JobStatus) {
	if err := f.ck.coord.Shutdown(status); err != nil {
		f.log.Warn("shutting the checkpoint coordinator down", zap.Stringer("status", status), zap.Error(err))
	}
}

// runAttempt attaches the coordinator to a, runs it, and detaches.
func (f *failover) runAttempt(ctx context.Context, a attempt) error {
	coord := f.ck.coord
	actx, acancel := context.WithCancelCause(ctx)
	defer acancel(nil)
	f.ck.mu.Lock()
	f.ck.mu.cancelAttempt = acancel
	f.ck.mu.Unlock()
	sources, all := a.taskKeys()
	if err := coord.Attach(sources, all, a.gateway(), coordinator.WithUpstream(f.upstream), coordinator.WithOperators(f.operators)); err != nil {
		return fmt.Errorf("weir: %w", err)
	}
	var once sync.Once
	err := a.run(actx, func(err error) {
		if err == nil {
			// A task finished; it told the coordinator, which goes on
			// checkpointing the others (FLIP-147).
			return
		}
		once.Do(func() {
			// A failing attempt takes no more checkpoints while its
			// tasks stop (Flink suspends the scheduler on failover).
			coord.Detach(detachReason(ctx, err))
		})
	})
	if cause := context.Cause(actx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	coord.Detach(detachReason(ctx, err))
	return err
}

// detachReason is what the coordinator is told when an attempt of the job
// whose context is ctx ends with err: a cancellation of the job is said
// to be one (not logged as a failed attempt).
func detachReason(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w: %w", coordinator.ErrJobCanceled, err)
	}
	return err
}

// localAttempt is an attempt whose tasks all run in this process.
type localAttempt struct {
	n     int // attempt number
	d     *deploy.Deployment
	byKey map[state.TaskKey]*task.Task
	final *FinalCommits // nil: no sink commits at the end
}

func newLocalAttempt(n int, d *deploy.Deployment, final *FinalCommits) *localAttempt {
	a := &localAttempt{n: n, d: d, byKey: make(map[state.TaskKey]*task.Task, len(d.Tasks())), final: final}
	for _, t := range d.Tasks() {
		a.byKey[t.Key()] = t
	}
	return a
}

func (a *localAttempt) taskKeys() (sources, all []state.TaskKey) {
	for _, t := range a.d.Tasks() {
		all = append(all, t.Key())
		if t.IsSource() {
			sources = append(sources, t.Key())
		}
	}
	return sources, all
}

func (a *localAttempt) gateway() coordinator.TaskGateway { return a }

func (a *localAttempt) run(ctx context.Context, ended func(error)) error {
	return a.d.Run(ctx, func(_ state.TaskKey, err error) { ended(err) })
}

func (a *localAttempt) resolveFinal(commit bool, completed barrier.CheckpointID) error {
	return a.final.Resolve(commit, completed)
}

func (a *localAttempt) metrics() []task.Metrics { return a.d.Metrics() }

func (a *localAttempt) samples() []metrics.TaskSample { return localSamples(a.d, a.n)() }

// TriggerCheckpoint, NotifyCheckpointComplete and NotifyCheckpointAborted
// implement coordinator.TaskGateway. byKey is read-only after creation.
func (a *localAttempt) TriggerCheckpoint(k state.TaskKey, b barrier.Barrier) error {
	t := a.byKey[k]
	if t == nil {
		return fmt.Errorf("weir: no task %v", k)
	}
	t.TriggerCheckpoint(b)
	return nil
}

func (a *localAttempt) NotifyCheckpointComplete(k state.TaskKey, id barrier.CheckpointID) {
	if t := a.byKey[k]; t != nil {
		t.NotifyCheckpointComplete(id)
	}
}

func (a *localAttempt) NotifyCheckpointAborted(k state.TaskKey, id barrier.CheckpointID) {
	if t := a.byKey[k]; t != nil {
		t.NotifyCheckpointAborted(id)
	}
}
