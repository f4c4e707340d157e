package jobmaster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/cluster"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/deploy"
	"github.com/weirstream/weir/internal/metrics"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

var (
	srcKey  = state.TaskKey{Vertex: "src", Subtask: 0}
	sinkKey = state.TaskKey{Vertex: "sink", Subtask: 0}
)

// fakeAttempt is an attempt whose run is scripted by the test. Its
// gateway acknowledges every triggered checkpoint for both tasks.
type fakeAttempt struct {
	n       int
	restore *deploy.RestorePoint
	coord   *coordinator.CheckpointCoordinator
	script  func(ctx context.Context, a *fakeAttempt) error

	mu       sync.Mutex
	resolved []string
}

func (a *fakeAttempt) taskKeys() (sources, all []state.TaskKey) {
	return []state.TaskKey{srcKey}, []state.TaskKey{srcKey, sinkKey}
}
func (a *fakeAttempt) gateway() coordinator.TaskGateway { return a }
func (a *fakeAttempt) run(ctx context.Context, ended func(error)) error {
	a.coord.TaskRunning(srcKey)
	a.coord.TaskRunning(sinkKey)
	err := a.script(ctx, a)
	ended(err)
	return err
}
func (a *fakeAttempt) resolveFinal(commit bool, completed barrier.CheckpointID) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if commit {
		a.resolved = append(a.resolved, "commit")
	} else {
		a.resolved = append(a.resolved, "abort up to "+string(rune('0'+completed)))
	}
	return nil
}
func (a *fakeAttempt) metrics() []task.Metrics { return []task.Metrics{{Name: "fake"}} }

func (a *fakeAttempt) samples() []metrics.TaskSample { return nil }

func (a *fakeAttempt) TriggerCheckpoint(_ state.TaskKey, b barrier.Barrier) error {
	for _, k := range []state.TaskKey{srcKey, sinkKey} {
		a.coord.Acknowledge(k, b.ID, state.TaskSnapshot{}, coordinator.TaskCheckpointMetrics{})
	}
	return nil
}
func (a *fakeAttempt) NotifyCheckpointComplete(state.TaskKey, barrier.CheckpointID) {}
func (a *fakeAttempt) NotifyCheckpointAborted(state.TaskKey, barrier.CheckpointID)  {}

// loop is a failover loop over fake attempts; scripts[i] runs attempt i.
type loop struct {
	f        *failover
	attempts []*fakeAttempt
	cleanup  func()
}

func newLoop(t *testing.T, restart coordinator.RestartStrategy, restoreFrom string, scripts ...func(context.Context, *fakeAttempt) error) *loop {
	t.Helper()
	log := zaptest.NewLogger(t)
	ck, cleanup, err := newCheckpointing(&CheckpointSpec{Coordinator: coordinator.Config{Interval: time.Hour},
		Dir: t.TempDir(), RestoreFrom: restoreFrom}, nil, log, "")
	require.NoError(t, err)
	l := &loop{cleanup: cleanup}
	start := func(_ context.Context, n int, restore *deploy.RestorePoint) (attempt, error) {
		require.Less(t, n, len(scripts), "attempt %d not scripted", n)
		a := &fakeAttempt{n: n, restore: restore, coord: ck.coord, script: scripts[n]}
		l.attempts = append(l.attempts, a)
		return a, nil
	}
	l.f = &failover{ck: ck, start: start, restart: restart, log: log}
	return l
}

func fixedDelay(t *testing.T, attempts int, delay time.Duration) coordinator.RestartStrategy {
	s, err := coordinator.NewFixedDelay(coordinator.FixedDelayConfig{Attempts: attempts, Delay: delay})
	require.NoError(t, err)
	return s
}

func checkpoint(ctx context.Context, a *fakeAttempt) error {
	_, err := a.coord.TriggerCheckpoint(ctx)
	return err
}

var errBoom = errors.New("task exploded")

// Each failure restarts the job after the strategy's delay, from the
// latest completed checkpoint; the restarts are counted, and finished
// sinks' transactions are settled after every attempt: up to the latest
// completed checkpoint after a failure, all of them after success.
func TestFailoverRestartsFromLatestCheckpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLoop(t, fixedDelay(t, 5, time.Second), "",
			func(ctx context.Context, a *fakeAttempt) error { return errBoom }, // before any checkpoint
			func(ctx context.Context, a *fakeAttempt) error {
				if err := checkpoint(ctx, a); err != nil {
					return err
				}
				return errBoom
			},
			func(ctx context.Context, a *fakeAttempt) error {
				return checkpoint(ctx, a) // and finishes
			},
		)
		defer l.cleanup()
		begin := time.Now()
		res := &Result{}
		require.NoError(t, l.f.run(t.Context(), res))
		require.Equal(t, 2, res.Restarts)
		require.Equal(t, 2*time.Second, time.Since(begin), "two restart delays, in virtual time")
		require.Len(t, l.attempts, 3)
		require.Nil(t, l.attempts[0].restore)
		require.Nil(t, l.attempts[1].restore, "no checkpoint completed before the second attempt")
		require.NotNil(t, l.attempts[2].restore)
		require.Equal(t, barrier.CheckpointID(1), l.attempts[2].restore.Meta.ID)
		require.Equal(t, []string{"abort up to 0"}, l.attempts[0].resolved)
		require.Equal(t, []string{"abort up to 1"}, l.attempts[1].resolved)
		require.Equal(t, []string{"commit"}, l.attempts[2].resolved)
		require.Equal(t, 2, res.Checkpoints.Completed)
		require.Equal(t, []task.Metrics{{Name: "fake"}}, res.Tasks)
	})
}

// A job started from a savepoint restores every attempt from it until a
// newer checkpoint completed.
func TestFailoverRestoresFromSavepointUntilNewerCheckpoint(t *testing.T) {
	dir := t.TempDir()
	// Take a savepoint with a first job.
	synctest.Test(t, func(t *testing.T) {
		var path string
		l := newLoop(t, fixedDelay(t, 1, time.Second), "", func(ctx context.Context, a *fakeAttempt) error {
			var err error
			path, err = a.coord.TriggerSavepoint(ctx, dir)
			return err
		})
		defer l.cleanup()
		require.NoError(t, l.f.run(t.Context(), &Result{}))
		require.NotEmpty(t, path)

		l2 := newLoop(t, fixedDelay(t, 5, time.Second), path,
			func(ctx context.Context, a *fakeAttempt) error { return errBoom },
			func(ctx context.Context, a *fakeAttempt) error {
				if err := checkpoint(ctx, a); err != nil {
					return err
				}
				return errBoom
			},
			func(ctx context.Context, a *fakeAttempt) error { return nil },
		)
		defer l2.cleanup()
		require.NoError(t, l2.f.run(t.Context(), &Result{}))
		for i, want := range []barrier.Kind{barrier.Savepoint, barrier.Savepoint, barrier.Checkpoint} {
			a := l2.attempts[i]
			require.NotNil(t, a.restore, "attempt %d", i)
			require.Equal(t, want, a.restore.Meta.Kind, "attempt %d", i)
		}
		require.Equal(t, barrier.CheckpointID(2), l2.attempts[2].restore.Meta.ID, "IDs continue after the savepoint's")
	})
}

// When the restart strategy gives up, the job fails with the attempt's
// error.
func TestFailoverGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fail := func(ctx context.Context, a *fakeAttempt) error { return errBoom }
		l := newLoop(t, fixedDelay(t, 1, time.Second), "", fail, fail)
		defer l.cleanup()
		res := &Result{}
		err := l.f.run(t.Context(), res)
		require.ErrorIs(t, err, errBoom)
		require.ErrorContains(t, err, "will not restart")
		require.Equal(t, 1, res.Restarts)
		require.Len(t, l.attempts, 2)
	})
}

// Canceling the job while it waits to restart returns at once with the
// failure; no further attempt is deployed.
func TestFailoverCanceledDuringRestartDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		l := newLoop(t, fixedDelay(t, 5, time.Hour), "", func(ctx context.Context, a *fakeAttempt) error {
			time.AfterFunc(time.Minute, cancel) // during the hour-long delay
			return errBoom
		})
		defer l.cleanup()
		begin := time.Now()
		err := l.f.run(ctx, &Result{})
		require.ErrorIs(t, err, errBoom)
		require.Equal(t, time.Minute, time.Since(begin))
		require.Len(t, l.attempts, 1)
	})
}

// Too many failed checkpoints fail the running attempt with the
// coordinator's error; the job restarts.
func TestFailoverCheckpointFailuresFailTheAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLoop(t, fixedDelay(t, 5, time.Second), "",
			func(ctx context.Context, a *fakeAttempt) error {
				// A decline that counts, with 0 tolerated failures.
				go func() {
					_, _ = a.coord.TriggerCheckpoint(ctx)
				}()
				synctest.Wait()
				a.coord.Decline(sinkKey, 1, barrier.Decline(barrier.DeclineSnapshotFailed, errors.New("disk full")))
				<-ctx.Done()
				return context.Cause(ctx)
			},
			func(ctx context.Context, a *fakeAttempt) error { return nil },
		)
		defer l.cleanup()
		// The gateway acks at once: replace it for the first attempt by
		// one that does not, so the decline finds the checkpoint pending.
		start := l.f.start
		l.f.start = func(ctx context.Context, n int, rp *deploy.RestorePoint) (attempt, error) {
			a, err := start(ctx, n, rp)
			if n == 0 {
				return silentGateway{a.(*fakeAttempt)}, err
			}
			return a, err
		}
		res := &Result{}
		require.NoError(t, l.f.run(t.Context(), res))
		require.Equal(t, 1, res.Restarts)
		require.Equal(t, 1, res.Checkpoints.Failed)
	})
}

// silentGateway never acknowledges.
type silentGateway struct{ *fakeAttempt }

func (g silentGateway) gateway() coordinator.TaskGateway { return g }
func (g silentGateway) TriggerCheckpoint(state.TaskKey, barrier.Barrier) error {
	return nil
}

// A task that refuses its restore makes the tasks connected to it fail
// too, and their failures may reach the coordinator first: the attempt's
// verdict, once every task stopped, is the non-recoverable failure, so the
// job does not restart into the same refusal.
func TestClusterAttemptRootCause(t *testing.T) {
	a := &clusterAttempt{all: []state.TaskKey{srcKey, sinkKey}, owner: map[state.TaskKey]string{srcKey: "w1", sinkKey: "w2"},
		notify: make(chan struct{}, 1)}
	a.mu.ended, a.mu.stats, a.mu.live = map[state.TaskKey]error{}, map[state.TaskKey]task.Metrics{}, map[state.TaskKey]task.LiveMetrics{}
	a.taskEnded(&cluster.TaskStatus{Task: srcKey, State: cluster.Failed, Error: "network: use of closed network connection"})
	first, _, _ := a.progress()
	require.ErrorContains(t, first, "closed network connection")
	require.Same(t, first, a.rootCause(first), "no non-recoverable failure: the first one")
	a.taskEnded(&cluster.TaskStatus{Task: sinkKey, State: cluster.Failed, Error: "restore refused", NonRecoverable: true})
	root := a.rootCause(first)
	require.True(t, nonRecoverable(root))
	require.ErrorContains(t, root, "task sink (subtask 0) on worker w2: restore refused")
}
