package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/cluster"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/dashboard"
	"github.com/weirstream/weir/internal/deploy"
	"github.com/weirstream/weir/internal/errcode"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/ha"
	"github.com/weirstream/weir/internal/metrics"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// clusterJob is the coordinator's side of a job on workers: it receives
// the workers' messages and routes them to the current attempt.
type clusterJob struct {
	spec *Spec
	cfg  ClusterSpec
	ck   *checkpointing
	srv  *cluster.Server
	job  uuid.UUID
	// storage is where the workers open the job's checkpoint storage
	storage state.Location
	log     *zap.Logger
	mode    barrier.Mode
	// ha, lead and guard: a highly available job's record, this
	// coordinator's term as its leader and the guard of its checkpoint
	// writes (nil: no high availability).
	ha    *ha.Client
	lead  *ha.Leadership
	guard *leaderGuard
	epoch cluster.Epoch // lead's epoch

	mu struct {
		sync.Mutex
		cur *clusterAttempt
		// workers are the connected workers with their latest runtime
		// report, for the dashboard's per-worker view.
		workers map[string]*metrics.Worker
		// profilable are the connected workers that record CPU profiles
		// (cluster.FeatureProfile); profiles the profile in flight of
		// each, nextProfile the last profile's ID.
		profilable  map[string]bool
		profiles    map[string]*pendingProfile
		nextProfile uint64
	}
}

// pendingProfile is a CPU profile a worker was asked for.
type pendingProfile struct {
	id   uint64
	res  chan cluster.Profile // buffered(1): the worker's answer
	gone chan struct{}        // closed when the worker was lost
	err  error                // why, once gone is closed
}

// profileAnswerSlack is how much longer than its length a worker may
// take to answer a profile (less than the dashboard's slack for writing
// the answer, so that a silent worker still gets its 504 written).
const profileAnswerSlack = 5 * time.Second

// maxProfileBytes bounds a profile a worker sends (gRPC's default limit
// of a message is 4 MiB; the JSON holds it in base64).
const maxProfileBytes = 2 << 20

// profileWorker asks worker id for a CPU profile of its process of
// length d, over its control connection, and waits for it (dashboard.Control's
// ProfileWorker). One at a time per worker; ctx's end cancels it on the
// worker.
func (j *clusterJob) profileWorker(ctx context.Context, id string, d time.Duration) ([]byte, error) {
	if d < time.Millisecond || d > cluster.MaxProfileMillis*time.Millisecond {
		return nil, fmt.Errorf("weir: a worker's CPU profile takes 1 ms to %v, not %v", cluster.MaxProfileMillis*time.Millisecond, d)
	}
	j.mu.Lock()
	switch {
	case j.mu.workers[id] == nil:
		j.mu.Unlock()
		return nil, fmt.Errorf("%w %q", dashboard.ErrNoWorker, id)
	case !j.mu.profilable[id]:
		j.mu.Unlock()
		return nil, fmt.Errorf("worker %s runs a weir that records no CPU profile for the coordinator (%w)", id, dashboard.ErrConflict)
	case j.mu.profiles[id] != nil:
		j.mu.Unlock()
		return nil, fmt.Errorf("%w on worker %s", dashboard.ErrProfileBusy, id)
	}
	j.mu.nextProfile++
	p := &pendingProfile{id: j.mu.nextProfile, res: make(chan cluster.Profile, 1), gone: make(chan struct{})}
	j.mu.profiles[id] = p
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		if j.mu.profiles[id] == p {
			delete(j.mu.profiles, id)
		}
		j.mu.Unlock()
	}()
	sctx, cancel := context.WithTimeout(ctx, sendTimeout)
	err := j.srv.Send(sctx, id, cluster.CoordinatorMessage{StartProfile: &cluster.StartProfile{ID: p.id, Millis: d.Milliseconds()}})
	cancel()
	if errors.Is(err, cluster.ErrNotConnected) {
		return nil, fmt.Errorf("%w: worker %s: %w", dashboard.ErrWorkerGone, id, err)
	} else if err != nil {
		return nil, fmt.Errorf("weir: asking worker %s for a CPU profile: %w", id, err)
	}
	t := time.NewTimer(d + profileAnswerSlack)
	defer t.Stop()
	select {
	case r := <-p.res:
		switch {
		case r.Busy:
			return nil, fmt.Errorf("%w in the process of worker %s: %s", dashboard.ErrProfileBusy, id, r.Error)
		case r.Error != "":
			return nil, fmt.Errorf("weir: worker %s: CPU profile: %s", id, r.Error)
		}
		return r.Data, nil
	case <-p.gone:
		return nil, fmt.Errorf("%w: worker %s was lost during its CPU profile: %w", dashboard.ErrWorkerGone, id, p.err)
	case <-ctx.Done():
		j.cancelProfile(id, p.id)
		return nil, ctx.Err()
	case <-t.C:
		j.cancelProfile(id, p.id)
		return nil, fmt.Errorf("weir: worker %s did not answer its CPU profile within %v: %w", id, d+profileAnswerSlack,
			context.DeadlineExceeded)
	}
}

// cancelProfile tells worker id to stop profile n, if it can be told.
func (j *clusterJob) cancelProfile(id string, n uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := j.srv.Send(ctx, id, cluster.CoordinatorMessage{CancelProfile: &cluster.CancelProfile{ID: n}}); err != nil {
		j.log.Debug("profile not canceled", zap.String("worker", id), zap.Error(err))
	}
}

// workerList returns the connected workers, by ID, with the current
// attempt's tasks on each.
func (j *clusterJob) workerList() []metrics.Worker {
	j.mu.Lock()
	out := make([]metrics.Worker, 0, len(j.mu.workers))
	for _, w := range j.mu.workers {
		out = append(out, *w)
	}
	a := j.mu.cur
	j.mu.Unlock()
	slices.SortFunc(out, func(a, b metrics.Worker) int { return strings.Compare(a.ID, b.ID) })
	if a != nil {
		tasks := map[string]int{}
		for _, w := range a.owner {
			tasks[w]++
		}
		for i := range out {
			out[i].Tasks = tasks[out[i].ID]
		}
	}
	return out
}

// runCluster runs the job as the coordinator of workers; with high
// availability (hc), once elected its leader.
func runCluster(ctx context.Context, spec *Spec, ck *checkpointing, status *jobStatus, res *Result, hc *ha.Client) (err error) {
	if ck == nil {
		return errors.New("weir: a job across processes needs checkpointing")
	}
	cfg := *spec.Cluster
	loc, ok := locationOf(ck.storage)
	if !ok {
		return errors.New("weir: cluster: checkpoints must go to storage the workers share (CheckpointConfig.Dir: a directory every process mounts, or object storage)")
	}
	j := &clusterJob{spec: spec, cfg: cfg, ck: ck, job: uuid.New(), storage: loc, log: spec.Logger, mode: ck.mode,
		ha: hc, guard: ck.guard}
	j.mu.workers = map[string]*metrics.Worker{}
	j.mu.profilable, j.mu.profiles = map[string]bool{}, map[string]*pendingProfile{}
	status.setWorkers(j.workerList, j.profileWorker)
	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return fmt.Errorf("weir: cluster: %w", err)
		}
	}
	// recordEnd, with high availability, records how the job ended in
	// etcd, once.
	var recordEnd func(error) error
	if hc != nil {
		addr := cfg.HA.Advertise
		if addr == "" {
			addr = ln.Addr().String()
		}
		j.log.Info("campaigning for leadership", zap.String("job", hc.JobID()), zap.String("addr", addr))
		if j.lead, err = hc.Campaign(ctx, coordinatorID(cfg.HA), addr); err != nil {
			ln.Close()
			return fmt.Errorf("weir: ha: %w", err)
		}
		defer j.lead.Resign()
		j.epoch = cluster.Epoch(j.lead.Epoch())
		if ended, err := j.takeOver(ctx, j.lead); ended || err != nil {
			ln.Close()
			return err
		}
		parent := ctx
		lctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		go func() {
			select {
			case <-j.lead.Lost():
				cancel(j.lead.Err())
			case <-lctx.Done():
			}
		}()
		ctx = lctx
		// The end is recorded before the server closes (below), which
		// sends the workers Shutdown: they then find the job ended in
		// etcd rather than look for its next leader. This one records
		// the end of a term that ends before the server runs.
		recordEnd = func(err error) error {
			recordEnd = nil
			return j.endTerm(parent, j.lead, err)
		}
		defer func() {
			if recordEnd != nil {
				err = recordEnd(err)
			}
		}()
	}
	srv, err := cluster.NewServer(cluster.ServerConfig{TLS: cfg.TLS, Token: cfg.Token, Fingerprint: fingerprint(spec.Graph, ck.mode),
		HeartbeatInterval: cfg.HeartbeatInterval, HeartbeatTimeout: cfg.HeartbeatTimeout, Logger: spec.Logger}, j)
	if err != nil {
		ln.Close()
		return fmt.Errorf("weir: cluster: %w", err)
	}
	j.srv = srv
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	defer func() {
		if recordEnd != nil {
			err = recordEnd(err)
		}
		srv.Close() // tells the workers to shut down
		<-served
	}()
	j.log.Info("coordinator listening", zap.String("addr", ln.Addr().String()), zap.Int("workers", cfg.Workers))
	wctx, cancel := context.WithTimeout(ctx, cfg.WorkerTimeout)
	_, err = srv.WaitWorkers(wctx, cfg.Workers)
	cancel()
	if err != nil {
		return fmt.Errorf("weir: cluster: waiting for %d workers: %w", cfg.Workers, err)
	}
	return newFailover(spec, ck, status, j.startAttempt).run(ctx, res)
}

// fingerprint identifies the job for the workers: its graph and its
// checkpointing mode.
func fingerprint(g *graph.JobGraph, mode barrier.Mode) string {
	return g.Fingerprint(fmt.Sprintf("mode=%d", mode))
}

func (j *clusterJob) current() *clusterAttempt {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.mu.cur
}

// WorkerJoined implements cluster.Handler.
func (j *clusterJob) WorkerJoined(w cluster.WorkerInfo) {
	j.log.Info("worker joined", zap.String("worker", w.ID), zap.String("data", w.DataAddr), zap.String("peer", w.Peer))
	j.mu.Lock()
	j.mu.workers[w.ID] = &metrics.Worker{ID: w.ID, DataAddr: w.DataAddr, Peer: w.Peer}
	j.mu.profilable[w.ID] = slices.Contains(w.Features, cluster.FeatureProfile)
	j.mu.Unlock()
}

// WorkerLost implements cluster.Handler.
func (j *clusterJob) WorkerLost(id string, err error) {
	j.log.Info("worker lost", zap.String("worker", id), zap.Error(err))
	j.mu.Lock()
	delete(j.mu.workers, id)
	delete(j.mu.profilable, id)
	if p := j.mu.profiles[id]; p != nil {
		p.err = err
		close(p.gone)
		delete(j.mu.profiles, id)
	}
	j.mu.Unlock()
	if a := j.current(); a != nil {
		a.workerLost(id, err)
	}
}

// Message implements cluster.Handler.
func (j *clusterJob) Message(id string, m cluster.WorkerMessage) {
	if r := m.Profile; r != nil {
		j.mu.Lock()
		if p := j.mu.profiles[id]; p != nil && p.id == r.ID {
			select {
			case p.res <- *r:
			default: // a duplicate
			}
		}
		j.mu.Unlock()
		return
	}
	if m.Metrics != nil && m.Metrics.Runtime != nil {
		j.mu.Lock()
		if w := j.mu.workers[id]; w != nil {
			w.Runtime, w.Reported = metrics.Runtime(*m.Metrics.Runtime), time.Now()
		}
		j.mu.Unlock()
	}
	a := j.current()
	switch {
	case a == nil:
	case m.Metrics != nil && m.Metrics.Attempt == a.n:
		a.reported(id, m.Metrics)
	case m.TaskStatus != nil && m.TaskStatus.Attempt == a.n && m.TaskStatus.State == cluster.Running:
		j.ck.coord.TaskRunning(m.TaskStatus.Task)
	case m.TaskStatus != nil && m.TaskStatus.Attempt == a.n && m.TaskStatus.State == cluster.Finishing:
		j.ck.coord.TaskFinishing(m.TaskStatus.Task)
	case m.TaskStatus != nil && m.TaskStatus.Attempt == a.n:
		if m.TaskStatus.State == cluster.Finished {
			j.ck.coord.TaskFinished(m.TaskStatus.Task)
		}
		a.taskEnded(m.TaskStatus)
	case m.Ack != nil && m.Ack.Attempt == a.n:
		r := m.Ack
		snap, err := state.DecodeTaskSnapshot(r.Snapshot)
		if err != nil {
			j.ck.coord.Decline(r.Task, r.ID, barrier.Decline(barrier.DeclineSnapshotFailed, err))
			return
		}
		j.ck.coord.Acknowledge(r.Task, r.ID, snap, r.Metrics.ToCoordinator())
	case m.Decline != nil && m.Decline.Attempt == a.n:
		r := m.Decline
		var reason error = errors.New(r.Reason)
		if r.Kind.Valid() {
			reason = barrier.Decline(r.Kind, reason)
		}
		j.ck.coord.Decline(r.Task, r.ID, reason)
	case m.Committed != nil && m.Committed.Attempt == a.n:
		a.committed(id, m.Committed.Error)
	}
}

// startAttempt places attempt n's tasks on the live workers and sends
// each of them the placement.
func (j *clusterJob) startAttempt(ctx context.Context, n int, restore *deploy.RestorePoint) (attempt, error) {
	workers := j.srv.Workers()
	if len(workers) < j.cfg.Workers {
		wctx, cancel := context.WithTimeout(ctx, j.cfg.WorkerTimeout)
		ws, err := j.srv.WaitWorkers(wctx, j.cfg.Workers)
		cancel()
		if err == nil {
			workers = ws
		} else if workers = j.srv.Workers(); len(workers) == 0 {
			return nil, fmt.Errorf("weir: cluster: no worker to deploy on: %w", err)
		}
	}
	sources, all := j.spec.Graph.TaskKeys()
	a := &clusterAttempt{j: j, n: cluster.Attempt(n), sources: sources, all: all,
		owner: make(map[state.TaskKey]string, len(all)), notify: make(chan struct{}, 1), outbox: newSerialQueue()}
	a.mu.ended, a.mu.stats, a.mu.live = map[state.TaskKey]error{}, map[state.TaskKey]task.Metrics{}, map[state.TaskKey]task.LiveMetrics{}
	a.mu.lost, a.mu.commits = map[string]error{}, map[string]string{}
	d := &cluster.Deploy{Attempt: a.n, Epoch: j.epoch, JobID: j.job.String(), DataAddrs: map[string]string{}, Checkpoints: wireLocation(j.storage), Mode: j.mode,
		Alignment: j.ck.alignment, AlignmentTimeoutMillis: j.ck.alignTimeout.Milliseconds()}
	for _, k := range all {
		// Subtask i of every vertex goes to the same worker: forward
		// exchanges stay in one process.
		w := workers[k.Subtask%len(workers)]
		a.owner[k] = w.ID
		d.Tasks = append(d.Tasks, cluster.Assignment{Task: k, WorkerID: w.ID})
		d.DataAddrs[w.ID] = w.DataAddr
	}
	if restore != nil {
		rl, ok := locationOf(restore.Reader)
		if !ok {
			return nil, errors.New("weir: cluster: the restore point is not in storage the workers can read")
		}
		wl := wireLocation(rl)
		d.Restore, d.RestoreFrom = state.EncodeMetadata(restore.Meta), &wl
	}
	for id := range d.DataAddrs {
		a.workers = append(a.workers, id)
	}
	slices.Sort(a.workers)
	j.mu.Lock()
	j.mu.cur = a
	j.mu.Unlock()
	for _, id := range a.workers {
		if err := a.send(ctx, id, cluster.CoordinatorMessage{Deploy: d}); err != nil {
			a.workerLost(id, fmt.Errorf("deploying: %w", err))
		}
	}
	j.log.Info("attempt deployed", zap.Int("attempt", n), zap.Strings("workers", a.workers), zap.Int("tasks", len(all)))
	return a, nil
}

// clusterAttempt is one attempt of a job on workers.
type clusterAttempt struct {
	j       *clusterJob
	n       cluster.Attempt
	sources []state.TaskKey
	all     []state.TaskKey
	owner   map[state.TaskKey]string // read-only after deploy
	workers []string                 // with tasks of this attempt, sorted

	notify chan struct{} // buffered(1): something below changed
	outbox *serialQueue  // checkpoint messages to the workers, in order

	mu struct {
		sync.Mutex
		ended   map[state.TaskKey]error // nil error: finished
		stats   map[state.TaskKey]task.Metrics
		live    map[state.TaskKey]task.LiveMetrics // latest reported
		lost    map[string]error                   // workers lost during the attempt
		commits map[string]string                  // worker → Committed's error
	}
}

const sendTimeout = 10 * time.Second

func (a *clusterAttempt) send(ctx context.Context, worker string, m cluster.CoordinatorMessage) error {
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	return a.j.srv.Send(ctx, worker, m)
}

func (a *clusterAttempt) kick() {
	select {
	case a.notify <- struct{}{}:
	default:
	}
}

func (a *clusterAttempt) taskEnded(s *cluster.TaskStatus) {
	var err error
	switch s.State {
	case cluster.Finished:
	case cluster.Failed:
		err = errcode.Wrap(fmt.Errorf("task %s (subtask %d) on worker %s: %s", s.Task.Vertex, s.Task.Subtask, a.owner[s.Task], s.Error), s.Codes)
		if s.NonRecoverable {
			err = &remoteNonRecoverable{err}
		}
	case cluster.Canceled:
		err = context.Canceled
		if s.Error != "" {
			err = fmt.Errorf("%w: task %s (subtask %d) on worker %s: %s", context.Canceled, s.Task.Vertex, s.Task.Subtask, a.owner[s.Task], s.Error)
		}
	default:
		return
	}
	a.mu.Lock()
	if _, dup := a.mu.ended[s.Task]; !dup {
		a.mu.ended[s.Task] = err
		if s.Metrics != nil {
			a.mu.stats[s.Task] = s.Metrics.ToTask()
		}
		a.endedLiveLocked(s)
	}
	a.mu.Unlock()
	a.kick()
}

func (a *clusterAttempt) workerLost(id string, err error) {
	a.mu.Lock()
	if _, dup := a.mu.lost[id]; !dup {
		a.mu.lost[id] = err
	}
	a.mu.Unlock()
	a.kick()
}

func (a *clusterAttempt) committed(id, errText string) {
	a.mu.Lock()
	a.mu.commits[id] = errText
	a.mu.Unlock()
	a.kick()
}

func (a *clusterAttempt) taskKeys() (sources, all []state.TaskKey) { return a.sources, a.all }

func (a *clusterAttempt) gateway() coordinator.TaskGateway { return a }

// progress returns why the attempt failed (nil: no failure so far),
// whether every task finished, and the number of tasks that finished.
func (a *clusterAttempt) progress() (failure error, done bool, finished int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range a.workers {
		if err := a.mu.lost[id]; err != nil {
			if failure == nil {
				failure = fmt.Errorf("worker %s lost: %w", id, err)
			}
		}
	}
	stopped, canceled := 0, error(nil)
	for _, k := range a.all {
		err, ok := a.mu.ended[k]
		switch {
		case !ok:
			if a.mu.lost[a.owner[k]] != nil {
				stopped++
			}
			continue
		case err == nil:
			finished++
		case errors.Is(err, context.Canceled):
			if canceled == nil {
				canceled = err
			}
		case failure == nil:
			failure = err
		}
		stopped++
	}
	if failure == nil && canceled != nil && stopped == len(a.all) {
		// Every task stopped, some canceled, none failed and the
		// attempt was not canceled here: nothing will end it but this.
		failure = fmt.Errorf("weir: cluster: every task of attempt %d stopped without finishing: %w", a.n, canceled)
	}
	return failure, finished == len(a.all), finished
}

func (a *clusterAttempt) run(ctx context.Context, ended func(error)) error {
	reported := 0
	for {
		failure, done, nfinished := a.progress()
		for ; reported < nfinished; reported++ {
			ended(nil)
		}
		if failure != nil {
			ended(failure)
			a.cancel(failure)
			return a.rootCause(failure)
		}
		if done {
			return nil
		}
		select {
		case <-a.notify:
		case <-ctx.Done():
			err := context.Cause(ctx)
			ended(err)
			a.cancel(err)
			return err
		}
	}
}

// rootCause returns, once the attempt's tasks stopped, a non-recoverable
// failure of any of them, else first (the failure reported first). A task
// that refuses its restore makes the tasks it feeds or reads fail too
// (their connections close), and their failures may reach the
// coordinator first; the attempt must not restart for them.
func (a *clusterAttempt) rootCause(first error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range a.all {
		if err := a.mu.ended[k]; err != nil && nonRecoverable(err) {
			return err
		}
	}
	return first
}

// cancel stops the attempt's tasks on every worker and waits, up to
// CancelTimeout, until each ended or its worker was lost.
func (a *clusterAttempt) cancel(cause error) {
	a.j.log.Info("canceling attempt", zap.Uint64("attempt", uint64(a.n)), zap.Error(cause))
	ctx, cancel := context.WithTimeout(context.Background(), a.j.cfg.CancelTimeout)
	defer cancel()
	for _, id := range a.workers {
		if err := a.send(ctx, id, cluster.CoordinatorMessage{CancelAttempt: &cluster.CancelAttempt{Attempt: a.n, Epoch: a.j.epoch}}); err != nil {
			a.workerLost(id, err)
		}
	}
	for !a.allStopped() {
		select {
		case <-a.notify:
		case <-ctx.Done():
			a.j.log.Warn("tasks did not confirm cancellation in time", zap.Uint64("attempt", uint64(a.n)))
			return
		}
	}
}

func (a *clusterAttempt) allStopped() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range a.all {
		if _, ok := a.mu.ended[k]; !ok && a.mu.lost[a.owner[k]] == nil {
			return false
		}
	}
	return true
}

// resolveFinal asks every worker of the attempt to commit or abort its
// finished sinks' transactions and waits for the answers.
func (a *clusterAttempt) resolveFinal(commit bool, completed barrier.CheckpointID) error {
	defer a.outbox.close() // the attempt is over
	ctx, cancel := context.WithTimeout(context.Background(), a.j.cfg.CancelTimeout)
	defer cancel()
	if commit && a.j.lead != nil {
		// Finished sinks commit only while this coordinator leads.
		if err := a.j.lead.Check(ctx); err != nil {
			return fmt.Errorf("weir: %w", err)
		}
	}
	m := cluster.CoordinatorMessage{Commit: &cluster.Commit{Attempt: a.n, Epoch: a.j.epoch, Commit: commit, Completed: completed}}
	for _, id := range a.workers {
		if err := a.send(ctx, id, m); err != nil {
			a.workerLost(id, err)
		}
	}
	for {
		var errs []error
		waiting := false
		a.mu.Lock()
		for _, id := range a.workers {
			if e, ok := a.mu.commits[id]; ok {
				if e != "" {
					errs = append(errs, fmt.Errorf("worker %s: %s", id, e))
				}
			} else if err := a.mu.lost[id]; err != nil {
				errs = append(errs, fmt.Errorf("worker %s lost before committing: %w", id, err))
			} else {
				waiting = true
			}
		}
		a.mu.Unlock()
		if !waiting {
			err := errors.Join(errs...)
			if err == nil && commit {
				err = a.j.spec.Final.Cleanup()
			}
			return err
		}
		select {
		case <-a.notify:
		case <-ctx.Done():
			return fmt.Errorf("weir: cluster: waiting for the workers' final commits: %w", ctx.Err())
		}
	}
}

// metrics are the metrics the workers reported for the tasks that ended.
func (a *clusterAttempt) metrics() []task.Metrics {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ms []task.Metrics
	for _, k := range a.all {
		if m, ok := a.mu.stats[k]; ok {
			ms = append(ms, m)
		}
	}
	return ms
}

// TriggerCheckpoint, NotifyCheckpointComplete and NotifyCheckpointAborted
// implement coordinator.TaskGateway over the control plane. They run in
// the coordinator's loop and never wait for the network: the messages go
// out, in order, from the attempt's outbox. A message that cannot be sent
// means the worker is lost, which fails the attempt; checkpoints pending
// at a lost worker's tasks are aborted with it.
func (a *clusterAttempt) TriggerCheckpoint(k state.TaskKey, b barrier.Barrier) error {
	a.post(k, cluster.CoordinatorMessage{TriggerCheckpoint: &cluster.TriggerCheckpoint{Attempt: a.n, Epoch: a.j.epoch, Task: k, Barrier: b}}, b.ID)
	return nil
}

func (a *clusterAttempt) NotifyCheckpointComplete(k state.TaskKey, id barrier.CheckpointID) {
	a.post(k, cluster.CoordinatorMessage{NotifyCheckpoint: &cluster.NotifyCheckpoint{Attempt: a.n, Epoch: a.j.epoch, Task: k, ID: id}}, 0)
}

func (a *clusterAttempt) NotifyCheckpointAborted(k state.TaskKey, id barrier.CheckpointID) {
	a.post(k, cluster.CoordinatorMessage{NotifyCheckpoint: &cluster.NotifyCheckpoint{Attempt: a.n, Epoch: a.j.epoch, Task: k, ID: id, Aborted: true}}, 0)
}

// post sends m to the worker running task k from the outbox. With high
// availability, a trigger of checkpoint reserve goes out only once etcd's
// counter has that ID, so that no later leader reuses it.
func (a *clusterAttempt) post(k state.TaskKey, m cluster.CoordinatorMessage, reserve barrier.CheckpointID) {
	worker := a.owner[k]
	a.outbox.put(func() {
		if reserve != 0 && a.j.lead != nil {
			if err := a.j.lead.Reserve(context.Background(), reserve); err != nil {
				a.j.log.Warn("checkpoint not triggered", zap.Uint64("checkpoint", uint64(reserve)), zap.Error(err))
				return // the term is over: the job stops here
			}
		}
		if err := a.send(context.Background(), worker, m); err != nil {
			if errors.Is(err, cluster.ErrNotConnected) {
				// The worker is gone (its loss fails the attempt over
				// already): nothing else needs attention.
				a.j.log.Info("checkpoint message not sent: the worker is no longer connected", zap.String("worker", worker))
			} else {
				a.j.log.Warn("checkpoint message not sent", zap.String("worker", worker), zap.Error(err))
			}
			a.workerLost(worker, err)
		}
	})
}

// reported keeps the latest metrics worker reported for its tasks.
func (a *clusterAttempt) reported(worker string, r *cluster.MetricsReport) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range r.Tasks {
		if a.owner[t.Task] != worker {
			continue // not the worker's task
		}
		if _, ended := a.mu.ended[t.Task]; ended {
			continue // a report that overtook the task's end
		}
		a.mu.live[t.Task] = t.ToTask()
	}
}

// endedLiveLocked marks task s.Task ended in its live metrics, with its
// final counters when the worker sent them.
func (a *clusterAttempt) endedLiveLocked(s *cluster.TaskStatus) {
	m := a.mu.live[s.Task]
	m.Key = s.Task
	if s.Metrics != nil {
		f := s.Metrics.ToTask()
		m.Name, m.RecordsIn, m.RecordsOut, m.BytesIn, m.BytesOut = f.Name, f.RecordsIn, f.RecordsOut, f.BytesIn, f.BytesOut
		m.Busy, m.Idle, m.BackPressured = f.Busy, f.Idle, f.BackPressured
		m.Elapsed = f.Busy + f.Idle + f.BackPressured
		m.Input, m.Output = network.BufferUsage{}, network.BufferUsage{}
	}
	switch s.State {
	case cluster.Finished:
		m.State = task.Finished
	case cluster.Failed:
		m.State = task.Failed
	default:
		m.State = task.Canceled
	}
	a.mu.live[s.Task] = m
}

// samples are the latest metrics the workers reported.
func (a *clusterAttempt) samples() []metrics.TaskSample {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]metrics.TaskSample, 0, len(a.mu.live))
	for _, k := range a.all {
		if m, ok := a.mu.live[k]; ok {
			out = append(out, metrics.TaskSample{LiveMetrics: m, Attempt: int(a.n), Location: a.owner[k]})
		}
	}
	return out
}
