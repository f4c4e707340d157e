package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/cluster"
	"github.com/weirstream/weir/internal/deploy"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// ErrOtherJob is returned by RunWorker when the coordinator runs another
// job than the worker built (a different graph or checkpointing mode).
var ErrOtherJob = errors.New("weir: worker: this process built a different job than the coordinator")

// RunWorker runs this process as a worker of the job of spec (spec.Cluster
// and spec.Checkpoint are ignored: the coordinator sends what the worker
// needs): it registers with the coordinator, runs the tasks the
// coordinator deploys here, serves their output to the other workers and
// reads theirs. It returns nil when the coordinator shuts it down (the job
// ended), ctx.Err() when ctx ends, or an error when the coordinator is
// lost or the data plane's listener failed (the coordinator then fails
// the attempt over to the other workers).
func RunWorker(ctx context.Context, spec Spec, wc WorkerSpec) (err error) {
	if spec.Logger == nil {
		spec.Logger = zap.NewNop()
	}
	spec.Deploy.Logger = spec.Logger
	if wc.ID == "" {
		wc.ID = uuid.NewString()
	}
	if wc.DataListen == "" {
		wc.DataListen = "127.0.0.1:0"
	}
	pool, err := deploy.NewNetworkPool(spec.Network)
	if err != nil {
		return err
	}
	token := []byte(wc.Token)
	dp, err := deploy.StartDataPlane(ctx, wc.DataListen, network.ServerConfig{Token: token, TLS: wc.DataTLS},
		network.ClientConfig{Token: token, TLS: wc.DataTLS}, spec.Logger)
	if err != nil {
		return err
	}
	w := &worker{spec: &spec, pool: pool, dp: dp, id: wc.ID, log: spec.Logger.With(zap.String("worker", wc.ID)),
		commands: newSerialQueue()}
	w.reportCtx, w.stopReports = context.WithCancel(context.Background())
	defer func() {
		w.stopReports()
		w.reports.Wait()
		if a := w.current(); a != nil {
			a.cancel(errors.New("weir: worker stopping")) // a queued commit may wait for its tasks
		}
		w.commands.close()
		w.stopAttempt()
		if cerr := dp.Close(); cerr != nil && err == nil {
			err = cerr
		}
		deploy.CheckLeaks(pool, w.log)
	}()
	// A data plane that stops accepting connections ends the worker: the
	// coordinator loses it and fails the attempt over to the others.
	ctx, cancel := context.WithCancelCause(ctx)
	var watch sync.WaitGroup
	defer watch.Wait()
	defer cancel(nil)
	watch.Go(func() {
		select {
		case <-dp.Failed():
			cancel(dp.Err())
		case <-ctx.Done():
		}
	})
	err = cluster.RunWorker(ctx, cluster.WorkerConfig{Coordinator: wc.Coordinator, TLS: wc.TLS, Token: wc.Token,
		Register: cluster.Register{WorkerID: wc.ID, DataAddr: dp.Addr(),
			Fingerprint: fingerprint(spec.Graph, checkpointMode(&spec))},
		HeartbeatInterval: wc.HeartbeatInterval, HeartbeatTimeout: wc.HeartbeatTimeout, Logger: spec.Logger}, w)
	if errors.Is(err, cluster.ErrRejected) && status.Code(err) == codes.FailedPrecondition {
		return fmt.Errorf("%w: %w", ErrOtherJob, err)
	}
	if derr := dp.Err(); derr != nil {
		return derr
	}
	return err
}

func checkpointMode(spec *Spec) barrier.Mode {
	if spec.Checkpoint == nil {
		return barrier.ExactlyOnce
	}
	return spec.Checkpoint.Coordinator.Mode
}

// worker runs the tasks the coordinator deploys in this process.
type worker struct {
	spec *Spec
	pool *buffer.GlobalPool
	dp   *deploy.DataPlane
	id   string
	log  *zap.Logger
	sess *cluster.Session
	// commands carries out the coordinator's commands in order, off the
	// session's receive loop (which must not block: heartbeats).
	commands *serialQueue
	// reports sends the running attempt's metrics periodically, until
	// reportCtx ends.
	reports     sync.WaitGroup
	reportCtx   context.Context
	stopReports context.CancelFunc

	mu struct {
		sync.Mutex
		cur *workerAttempt
		// canceledBelow is one past the newest attempt the coordinator
		// canceled (attempts count from 0).
		canceledBelow cluster.Attempt
	}
}

// workerAttempt is the part of one attempt running in this worker.
type workerAttempt struct {
	n      cluster.Attempt
	tasks  []*task.Task
	byKey  map[state.TaskKey]*task.Task
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// Connected implements cluster.WorkerHandler.
func (w *worker) Connected(s *cluster.Session) {
	w.sess = s
	w.reports.Go(w.reportMetrics)
}

// Command implements cluster.WorkerHandler: it queues m and returns.
func (w *worker) Command(ctx context.Context, m cluster.CoordinatorMessage) error {
	if c := m.CancelAttempt; c != nil {
		// At once, not behind a deployment or a commit waiting for the
		// attempt's tasks; a deployment of it still queued is skipped.
		w.mu.Lock()
		w.mu.canceledBelow = max(w.mu.canceledBelow, c.Attempt+1)
		w.mu.Unlock()
		if a := w.attempt(c.Attempt); a != nil {
			a.cancel(errors.New("weir: attempt canceled by the coordinator"))
		}
		return nil
	}
	w.commands.put(func() { w.command(ctx, m) })
	return nil
}

func (w *worker) command(ctx context.Context, m cluster.CoordinatorMessage) {
	switch {
	case m.Deploy != nil:
		w.deploy(ctx, m.Deploy)
	case m.TriggerCheckpoint != nil:
		c := m.TriggerCheckpoint
		if t := w.task(c.Attempt, c.Task); t != nil {
			t.TriggerCheckpoint(c.Barrier)
		} else {
			w.send(ctx, cluster.WorkerMessage{Decline: &cluster.Decline{Attempt: c.Attempt, Task: c.Task, ID: c.Barrier.ID,
				Kind: barrier.DeclineTaskNotReady, Reason: "task not running on worker " + w.id}})
		}
	case m.NotifyCheckpoint != nil:
		c := m.NotifyCheckpoint
		if t := w.task(c.Attempt, c.Task); t != nil {
			if c.Aborted {
				t.NotifyCheckpointAborted(c.ID)
			} else {
				t.NotifyCheckpointComplete(c.ID)
			}
		}
	case m.Commit != nil:
		c := m.Commit
		if a := w.attempt(c.Attempt); a != nil {
			<-a.done // every task of the attempt returned
		}
		var errText string
		// The coordinator runs the cleanups once every worker settled.
		if err := w.spec.Final.Settle(c.Commit, c.Completed); err != nil {
			errText = err.Error()
		}
		w.send(ctx, cluster.WorkerMessage{Committed: &cluster.Committed{Attempt: c.Attempt, Error: errText}})
	case m.Shutdown != nil:
		w.log.Info("shutdown", zap.String("reason", m.Shutdown.Reason))
		w.stopAttempt()
	}
}

func (w *worker) send(ctx context.Context, m cluster.WorkerMessage) {
	if err := w.sess.Send(ctx, m); err != nil {
		w.log.Warn("message to the coordinator not sent", zap.Error(err))
	}
}

func (w *worker) current() *workerAttempt {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.cur
}

func (w *worker) attempt(n cluster.Attempt) *workerAttempt {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.cur != nil && w.mu.cur.n == n {
		return w.mu.cur
	}
	return nil
}

func (w *worker) task(n cluster.Attempt, k state.TaskKey) *task.Task {
	if a := w.attempt(n); a != nil {
		return a.byKey[k]
	}
	return nil
}

// stopAttempt cancels the running attempt and waits for its tasks.
func (w *worker) stopAttempt() {
	w.mu.Lock()
	a := w.mu.cur
	w.mu.Unlock()
	if a != nil {
		a.cancel(errors.New("weir: worker stopping the attempt"))
		<-a.done
	}
}

// deploy starts this worker's part of attempt d.
func (w *worker) deploy(ctx context.Context, d *cluster.Deploy) {
	w.stopAttempt()
	w.mu.Lock()
	canceled := d.Attempt < w.mu.canceledBelow
	w.mu.Unlock()
	var mine []state.TaskKey
	pl := &deploy.Placement{Attempt: int(d.Attempt), Local: map[state.TaskKey]bool{}, Remote: map[state.TaskKey]string{}, Net: w.dp}
	for _, as := range d.Tasks {
		if as.WorkerID == w.id {
			pl.Local[as.Task] = true
			mine = append(mine, as.Task)
		} else {
			pl.Remote[as.Task] = d.DataAddrs[as.WorkerID]
		}
	}
	if canceled {
		for _, k := range mine {
			w.send(ctx, cluster.WorkerMessage{TaskStatus: &cluster.TaskStatus{Attempt: d.Attempt, Task: k, State: cluster.Canceled}})
		}
		return
	}
	dep, err := w.deployment(d, pl)
	if err != nil {
		w.log.Error("deploy failed", zap.Uint64("attempt", uint64(d.Attempt)), zap.Error(err))
		for _, k := range mine {
			w.send(ctx, cluster.WorkerMessage{TaskStatus: &cluster.TaskStatus{Attempt: d.Attempt, Task: k,
				State: cluster.Failed, Error: err.Error()}})
		}
		return
	}
	actx, cancel := context.WithCancelCause(context.Background())
	a := &workerAttempt{n: d.Attempt, tasks: dep.Tasks(), byKey: map[state.TaskKey]*task.Task{}, cancel: cancel, done: make(chan struct{})}
	for _, t := range dep.Tasks() {
		a.byKey[t.Key()] = t
	}
	w.mu.Lock()
	w.mu.cur = a
	canceled = d.Attempt < w.mu.canceledBelow // while it was being deployed
	w.mu.Unlock()
	if canceled {
		cancel(errors.New("weir: attempt canceled by the coordinator"))
	}
	go func() {
		defer close(a.done)
		defer cancel(nil)
		err := dep.Run(actx, func(k state.TaskKey, err error) {
			t := a.byKey[k]
			m := cluster.TaskMetricsFrom(t.Metrics())
			s := &cluster.TaskStatus{Attempt: d.Attempt, Task: k, State: cluster.Finished, Metrics: &m}
			if err != nil {
				// The task decided from its context whether it was
				// canceled or failed (an error wrapping
				// context.Canceled is a failure while the attempt runs).
				s.State, s.Error = cluster.Failed, err.Error()
				if t.State() == task.Canceled {
					s.State = cluster.Canceled
				}
			}
			w.send(ctx, cluster.WorkerMessage{TaskStatus: s})
		})
		if err != nil && actx.Err() == nil {
			// Each task's status carried its own error; this is the
			// attempt's, as this worker saw it.
			w.log.Info("attempt ended here with a failure", zap.Uint64("attempt", uint64(d.Attempt)), zap.Error(err))
		}
	}()
}

// deployment builds this worker's tasks of attempt d.
func (w *worker) deployment(d *cluster.Deploy, pl *deploy.Placement) (*deploy.Deployment, error) {
	job, err := uuid.Parse(d.JobID)
	if err != nil {
		return nil, fmt.Errorf("weir: worker: bad job ID: %w", err)
	}
	pl.Job = job
	storage, err := state.NewFileStorage(state.FileStorageConfig{Dir: d.CheckpointDir, JobID: d.CheckpointJobID, Logger: w.log})
	if err != nil {
		return nil, fmt.Errorf("weir: worker: checkpoint storage: %w", err)
	}
	var rp *deploy.RestorePoint
	if d.Restore != nil {
		m, err := state.DecodeMetadata(d.Restore)
		if err != nil {
			return nil, fmt.Errorf("weir: worker: restore point: %w", err)
		}
		reader, err := state.NewFileStorage(state.FileStorageConfig{Dir: d.RestoreDir, Logger: w.log})
		if err != nil {
			return nil, fmt.Errorf("weir: worker: restore point: %w", err)
		}
		rp = &deploy.RestorePoint{Meta: m, Reader: reader}
	}
	tc := &task.CheckpointConfig{Mode: d.Mode, Alignment: d.Alignment, AlignmentTimeout: time.Duration(d.AlignmentTimeoutMillis) * time.Millisecond,
		Storage: storage, Responder: &workerResponder{w: w, n: d.Attempt}}
	return deploy.Deploy(w.spec.Graph, w.spec.Deploy, w.pool, tc, rp, pl)
}

// workerResponder sends a worker's task checkpoint reports to the
// coordinator.
type workerResponder struct {
	w *worker
	n cluster.Attempt
}

func (r *workerResponder) Running(k state.TaskKey) {
	r.w.send(context.Background(), cluster.WorkerMessage{TaskStatus: &cluster.TaskStatus{Attempt: r.n, Task: k, State: cluster.Running}})
}

func (r *workerResponder) Finishing(k state.TaskKey) {
	r.w.send(context.Background(), cluster.WorkerMessage{TaskStatus: &cluster.TaskStatus{Attempt: r.n, Task: k, State: cluster.Finishing}})
}

// Finished implements task.CheckpointResponder: the TaskStatus the worker
// sends when the task returned (after its acknowledgements) says it.
func (r *workerResponder) Finished(state.TaskKey) {}

func (r *workerResponder) Acknowledge(k state.TaskKey, id barrier.CheckpointID, snap state.TaskSnapshot, m task.CheckpointMetrics) {
	r.w.send(context.Background(), cluster.WorkerMessage{Ack: &cluster.Ack{Attempt: r.n, Task: k, ID: id,
		Snapshot: state.EncodeTaskSnapshot(snap), Metrics: cluster.CheckpointMetricsFrom(checkpointMetrics(m))}})
}

func (r *workerResponder) Decline(k state.TaskKey, id barrier.CheckpointID, reason error) {
	d := &cluster.Decline{Attempt: r.n, Task: k, ID: id, Reason: reason.Error()}
	var de *barrier.DeclineError
	if errors.As(reason, &de) {
		d.Kind = de.Reason
	}
	r.w.send(context.Background(), cluster.WorkerMessage{Decline: d})
}

// reportMetrics sends the running attempt's task metrics to the
// coordinator every metrics interval, until the worker stops.
func (w *worker) reportMetrics() {
	t := time.NewTicker(w.spec.Metrics.interval())
	defer t.Stop()
	for {
		select {
		case <-w.reportCtx.Done():
			return
		case <-t.C:
		}
		a := w.current()
		if a == nil {
			continue
		}
		r := &cluster.MetricsReport{Attempt: a.n, Tasks: make([]cluster.LiveTaskMetrics, len(a.tasks))}
		for i, t := range a.tasks {
			r.Tasks[i] = cluster.LiveTaskMetricsFrom(t.LiveMetrics())
		}
		ctx, cancel := context.WithTimeout(w.reportCtx, sendTimeout)
		if err := w.sess.Send(ctx, cluster.WorkerMessage{Metrics: r}); err != nil {
			w.log.Debug("metrics report not sent", zap.Error(err))
		}
		cancel()
	}
}
