package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/cluster"
	"github.com/weirstream/weir/internal/dashboard"
	"github.com/weirstream/weir/internal/deploy"
	"github.com/weirstream/weir/internal/errcode"
	"github.com/weirstream/weir/internal/ha"
	"github.com/weirstream/weir/internal/metrics"
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
	w.storages.log = w.log
	w.reportCtx, w.stopReports = context.WithCancel(context.Background())
	w.reports.Go(w.reportMetrics)
	defer func() {
		w.profiles.Wait() // each ends with its session
		w.stopReports()
		w.reports.Wait()
		if a := w.current(); a != nil {
			a.cancel(errors.New("weir: worker stopping")) // a queued commit may wait for its tasks
		}
		w.commands.close()
		w.stopAttempt()
		w.storages.close()
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
	dataAddr := wc.DataAdvertise
	if dataAddr == "" {
		dataAddr = dp.Addr()
	}
	cfg := cluster.WorkerConfig{Coordinator: wc.Coordinator, TLS: wc.TLS, Token: wc.Token,
		Register: cluster.Register{WorkerID: wc.ID, DataAddr: dataAddr,
			Fingerprint: fingerprint(spec.Graph, checkpointMode(&spec)), Features: []string{cluster.FeatureProfile}},
		HeartbeatInterval: wc.HeartbeatInterval, HeartbeatTimeout: wc.HeartbeatTimeout, Logger: spec.Logger}
	if wc.HA != nil {
		err = w.followLeaders(ctx, cfg, *wc.HA)
	} else {
		err = otherJob(cluster.RunWorker(ctx, cfg, w))
	}
	if derr := dp.Err(); derr != nil {
		return derr
	}
	return err
}

func otherJob(err error) error {
	if errors.Is(err, cluster.ErrRejected) && status.Code(err) == codes.FailedPrecondition {
		return fmt.Errorf("%w: %w", ErrOtherJob, err)
	}
	return err
}

// ErrStaleEpoch ends a worker's session with a coordinator that sent a
// command of an older leader epoch than the one the worker serves: a
// deposed leader.
var ErrStaleEpoch = errors.New("weir: worker: command of a deposed leader")

// followLeaders serves the job's leaders one after the other, finding
// each through etcd, until the job ended (recorded in etcd) or ctx ends.
// Between two leaders the worker keeps nothing of the job: a new leader
// deploys every task again from its restore point.
func (w *worker) followLeaders(ctx context.Context, base cluster.WorkerConfig, cfg ha.Config) error {
	if cfg.Logger == nil {
		cfg.Logger = w.log.Named("ha")
	}
	hc, err := ha.Dial(ctx, cfg)
	if err != nil {
		return fmt.Errorf("weir: worker: %w", err)
	}
	defer hc.Close()
	for {
		if ended, err := w.jobEnded(ctx, hc); ended {
			return err
		}
		l, err := hc.WaitLeader(ctx)
		if errors.Is(err, ha.ErrJobEnded) {
			continue // jobEnded reports how it ended
		}
		if err != nil {
			return err
		}
		w.log.Info("following leader", zap.String("leader", l.ID), zap.String("addr", l.Addr), zap.Uint64("epoch", l.Epoch))
		sctx, cancel := context.WithCancel(ctx)
		changed := hc.WatchLeader(sctx, l.Epoch)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			<-changed // the leader changed, or sctx ended
			cancel()
		}()
		c := base
		c.Coordinator = l.Addr
		err = cluster.RunWorker(sctx, c, w)
		cancel()
		<-watched
		w.endSession()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, cluster.ErrRejected) && !errors.Is(err, context.Canceled):
			return otherJob(err)
		}
		w.log.Info("session with the leader ended", zap.Uint64("epoch", l.Epoch), zap.Error(err))
	}
}

// jobEnded reads the job's end from etcd, retrying while etcd is
// unreachable.
func (w *worker) jobEnded(ctx context.Context, hc *ha.Client) (bool, error) {
	for {
		rec, err := hc.Read(ctx)
		switch {
		case err == nil && rec.Status == nil:
			return false, nil
		case err == nil && rec.Status.Finished:
			return true, nil
		case err == nil:
			return true, fmt.Errorf("weir: worker: job %s failed: %s", hc.JobID(), rec.Status.Error)
		case ctx.Err() != nil:
			return true, ctx.Err()
		}
		w.log.Warn("reading the job's record", zap.Error(err))
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return true, ctx.Err()
		}
	}
}

// endSession stops what the session with a coordinator started, after
// the commands it queued (which a Deploy still running may need).
func (w *worker) endSession() {
	if a := w.current(); a != nil {
		a.cancel(errors.New("weir: the coordinator's session ended"))
	}
	done := make(chan struct{})
	if !w.commands.put(func() {
		defer close(done)
		w.stopAttempt()
		w.mu.Lock()
		w.mu.cur = nil
		w.mu.Unlock()
	}) {
		return
	}
	<-done
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
	sess atomic.Pointer[cluster.Session] // of the current coordinator
	// commands carries out the coordinator's commands in order, off the
	// session's receive loop (which must not block: heartbeats).
	commands *serialQueue
	// storages are the checkpoint storages the attempts opened.
	storages storages
	// reports sends the running attempt's metrics periodically, until
	// reportCtx ends.
	reports     sync.WaitGroup
	reportCtx   context.Context
	stopReports context.CancelFunc

	// profiles counts the goroutines recording CPU profiles; prof is the
	// one in flight.
	profiles sync.WaitGroup
	prof     struct {
		sync.Mutex
		id     uint64
		cancel context.CancelFunc // nil: none
	}

	mu struct {
		sync.Mutex
		cur *workerAttempt
		// canceledBelow is one past the newest attempt the coordinator
		// canceled (attempts count from 0, in each epoch).
		canceledBelow cluster.Attempt
		// epoch is the newest leader epoch that deployed here (0: none,
		// or no high availability).
		epoch cluster.Epoch
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
func (w *worker) Connected(s *cluster.Session) { w.sess.Store(s) }

// Command implements cluster.WorkerHandler: it queues m and returns. A
// command of an older epoch than the worker serves ends the session
// (ErrStaleEpoch).
func (w *worker) Command(ctx context.Context, m cluster.CoordinatorMessage) error {
	e, fenced := m.EpochOf()
	w.mu.Lock()
	served := w.mu.epoch
	if m.Deploy != nil && e > served {
		w.mu.epoch, w.mu.canceledBelow = e, 0 // attempts count anew
	}
	w.mu.Unlock()
	if fenced && e < served {
		w.log.Warn("refusing a command of a deposed leader", zap.Uint64("epoch", uint64(e)), zap.Uint64("serving", uint64(served)))
		return fmt.Errorf("%w: epoch %d, serving %d", ErrStaleEpoch, e, served)
	}
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
	switch {
	case m.StartProfile != nil: // at once too: a profile is no command of an attempt
		w.startProfile(ctx, m.StartProfile)
		return nil
	case m.CancelProfile != nil:
		w.prof.Lock()
		if w.prof.cancel != nil && w.prof.id == m.CancelProfile.ID {
			w.prof.cancel()
		}
		w.prof.Unlock()
		return nil
	}
	w.commands.put(func() { w.command(ctx, m) })
	return nil
}

// startProfile records a CPU profile of this process as p asks, in a
// goroutine, and sends it to the coordinator. ctx is the session's: the
// recording stops when it ends, or on CancelProfile, and then nobody
// waits for an answer.
func (w *worker) startProfile(ctx context.Context, p *cluster.StartProfile) {
	if p.Millis < 1 || p.Millis > cluster.MaxProfileMillis {
		w.send(ctx, cluster.WorkerMessage{Profile: &cluster.Profile{ID: p.ID,
			Error: fmt.Sprintf("a profile of %d ms: it takes 1 to %d ms", p.Millis, cluster.MaxProfileMillis)}})
		return
	}
	w.prof.Lock()
	if w.prof.cancel != nil {
		w.prof.Unlock()
		w.send(ctx, cluster.WorkerMessage{Profile: &cluster.Profile{ID: p.ID, Busy: true,
			Error: "worker " + w.id + " is recording another CPU profile"}})
		return
	}
	pctx, cancel := context.WithCancel(ctx)
	w.prof.id, w.prof.cancel = p.ID, cancel
	w.prof.Unlock()
	w.log.Info("recording a CPU profile", zap.Uint64("profile", p.ID), zap.Int64("ms", p.Millis))
	w.profiles.Go(func() {
		data, err := dashboard.CPUProfile(pctx, time.Duration(p.Millis)*time.Millisecond)
		w.prof.Lock()
		w.prof.cancel = nil
		w.prof.Unlock()
		canceled := pctx.Err() != nil
		cancel()
		if canceled {
			return
		}
		r := &cluster.Profile{ID: p.ID, Data: data}
		switch {
		case err != nil:
			r.Data, r.Error, r.Busy = nil, err.Error(), errors.Is(err, dashboard.ErrProfileBusy)
		case len(data) > maxProfileBytes:
			r.Data, r.Error = nil, fmt.Sprintf("the profile has %d bytes, more than the %d a message carries", len(data), maxProfileBytes)
		}
		if r.Error != "" {
			w.log.Warn("no CPU profile", zap.Uint64("profile", p.ID), zap.String("error", r.Error))
		} else {
			w.log.Info("CPU profile recorded", zap.Uint64("profile", p.ID), zap.Int("bytes", len(r.Data)))
		}
		w.send(ctx, cluster.WorkerMessage{Profile: r})
	})
}

func (w *worker) command(ctx context.Context, m cluster.CoordinatorMessage) {
	if ctx.Err() != nil {
		return // its session ended: the coordinator is gone
	}
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
	s := w.sess.Load()
	if s == nil {
		return
	}
	if err := s.Send(ctx, m); errors.Is(err, cluster.ErrSessionClosed) {
		w.log.Debug("message to the coordinator not sent", zap.Error(err))
	} else if err != nil {
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
				State: cluster.Failed, Error: err.Error(), NonRecoverable: nonRecoverable(err), Codes: errcode.Codes(err)}})
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
				s.State, s.Error, s.NonRecoverable, s.Codes = cluster.Failed, err.Error(), nonRecoverable(err), errcode.Codes(err)
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
	storage, err := w.storages.get(storageLocation(d.Checkpoints))
	if err != nil {
		return nil, fmt.Errorf("weir: worker: checkpoint storage: %w", err)
	}
	var rp *deploy.RestorePoint
	if d.Restore != nil {
		m, err := state.DecodeMetadata(d.Restore)
		if err != nil {
			return nil, fmt.Errorf("weir: worker: restore point: %w", err)
		}
		if d.RestoreFrom == nil {
			return nil, errors.New("weir: worker: restore point without its storage's location")
		}
		reader, err := w.storages.get(storageLocation(*d.RestoreFrom))
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
	var rt metrics.RuntimeReader // the process's heap, goroutines and GC
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
		run := cluster.RuntimeMetrics(rt.Read())
		r := &cluster.MetricsReport{Attempt: a.n, Tasks: make([]cluster.LiveTaskMetrics, len(a.tasks)), Runtime: &run}
		for i, t := range a.tasks {
			r.Tasks[i] = cluster.LiveTaskMetricsFrom(t.LiveMetrics())
		}
		s := w.sess.Load()
		if s == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(w.reportCtx, sendTimeout)
		if err := s.Send(ctx, cluster.WorkerMessage{Metrics: r}); err != nil {
			w.log.Debug("metrics report not sent", zap.Error(err))
		}
		cancel()
	}
}
