package weir

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
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
	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/cluster"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// ClusterConfig makes Execute (or Start) the coordinator of a job whose
// tasks run on worker processes: processes of the same program that build
// the same job and call RunWorker. The coordinator schedules the tasks
// onto the registered workers, triggers checkpoints and restarts the job
// from its latest completed checkpoint when a task fails or a worker is
// lost, on the workers that remain or rejoin. Workers exchange buffers
// directly over weir's TCP data plane (PROTOCOL.md); the control plane is
// gRPC.
//
// Checkpoint files are written by the workers: CheckpointConfig.Dir must
// be a directory every process can read and write (a shared file system
// across machines). Sinks run on the workers, so Collect's values stay
// there: use files or external systems for results.
type ClusterConfig struct {
	// Listener, if set, is where workers connect; otherwise Listen is
	// listened on (e.g. "127.0.0.1:7000").
	Listener net.Listener
	Listen   string
	// Workers is how many workers must register before the job is
	// deployed, and how many a restart waits for, up to WorkerTimeout,
	// before it makes do with those alive (default 1).
	Workers int
	// WorkerTimeout bounds those waits (default 1 min).
	WorkerTimeout time.Duration
	// CancelTimeout bounds the wait for a failed attempt's tasks to stop
	// before the next attempt is deployed (default 30 s).
	CancelTimeout time.Duration
	// Token, if set, must be presented by every worker, on the control and
	// the data plane (WorkerConfig.Token).
	Token string
	// TLS, if set, secures the control plane (a server configuration; set
	// ClientAuth and ClientCAs for mutual TLS).
	TLS *tls.Config
	// HeartbeatInterval and HeartbeatTimeout detect lost workers
	// (defaults 1 s and 5 s).
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
}

func (c *ClusterConfig) withDefaults() ClusterConfig {
	d := *c
	if d.Workers == 0 {
		d.Workers = 1
	}
	if d.WorkerTimeout == 0 {
		d.WorkerTimeout = time.Minute
	}
	if d.CancelTimeout == 0 {
		d.CancelTimeout = 30 * time.Second
	}
	return d
}

func (c *ClusterConfig) validate() error {
	switch {
	case c.Listener == nil && c.Listen == "":
		return errors.New("weir: cluster: no Listener or Listen address")
	case c.Workers < 0:
		return fmt.Errorf("weir: cluster: Workers %d must not be negative", c.Workers)
	case c.WorkerTimeout < 0 || c.CancelTimeout < 0:
		return errors.New("weir: cluster: negative timeout")
	}
	return (cluster.ServerConfig{HeartbeatInterval: c.HeartbeatInterval, HeartbeatTimeout: c.HeartbeatTimeout}).Validate()
}

// WithCluster runs the job across worker processes (see ClusterConfig). It
// needs WithCheckpointing.
func WithCluster(c ClusterConfig) Option {
	return optionFunc(func(cfg *config) { cfg.cluster = &c })
}

// fingerprint identifies the job graph: processes that build different
// graphs must not run one job together.
func (g *jobGraph) fingerprint(cfg *config) string {
	h := sha256.New()
	fmt.Fprintf(h, "maxp=%d\n", cfg.maxParallelism)
	if cfg.ckpt != nil {
		fmt.Fprintf(h, "mode=%d\n", cfg.ckpt.Mode)
	}
	for _, v := range g.vertices {
		fmt.Fprintf(h, "%q %q p=%d", v.id, v.name, v.parallelism)
		if in := v.input; in != nil {
			fmt.Fprintf(h, " in=%q/%d", g.byNode[in.from].id, in.partitioning)
		}
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// taskKeys lists every task of the graph, sources apart.
func (g *jobGraph) taskKeys() (sources, all []state.TaskKey) {
	for _, v := range g.vertices {
		for i := 0; i < v.parallelism; i++ {
			k := state.TaskKey{Vertex: v.id, Subtask: i}
			all = append(all, k)
			if v.input == nil {
				sources = append(sources, k)
			}
		}
	}
	return sources, all
}

// clusterJob is the coordinator's side of a job on workers: it receives
// the workers' messages and routes them to the current attempt.
type clusterJob struct {
	e    *Environment
	g    *jobGraph
	cfg  ClusterConfig
	ck   *checkpointing
	srv  *cluster.Server
	job  uuid.UUID
	dir  string // checkpoint directory the workers write to
	log  *zap.Logger
	mode barrier.Mode

	mu  sync.Mutex
	cur *clusterAttempt
}

func (e *Environment) runCluster(ctx context.Context, g *jobGraph, ck *checkpointing, res *Result) error {
	cfg := e.cfg.cluster.withDefaults()
	fs, ok := ck.storage.(*state.FileStorage)
	if !ok || fs.Dir() == "" {
		return errors.New("weir: cluster: checkpoints must go to a directory the workers share (CheckpointConfig.Dir)")
	}
	j := &clusterJob{e: e, g: g, cfg: cfg, ck: ck, job: uuid.New(), dir: fs.Dir(), log: e.cfg.logger, mode: e.cfg.ckpt.Mode}
	srv, err := cluster.NewServer(cluster.ServerConfig{TLS: cfg.TLS, Token: cfg.Token, Fingerprint: g.fingerprint(&e.cfg),
		HeartbeatInterval: cfg.HeartbeatInterval, HeartbeatTimeout: cfg.HeartbeatTimeout, Logger: e.cfg.logger}, j)
	if err != nil {
		return fmt.Errorf("weir: cluster: %w", err)
	}
	j.srv = srv
	ln := cfg.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return fmt.Errorf("weir: cluster: %w", err)
		}
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	defer func() {
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
	return e.runWithCheckpointing(ctx, ck, j.deploy, res)
}

func (j *clusterJob) current() *clusterAttempt {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.cur
}

// WorkerJoined implements cluster.Handler.
func (j *clusterJob) WorkerJoined(w cluster.WorkerInfo) {
	j.log.Info("worker joined", zap.String("worker", w.ID), zap.String("data", w.DataAddr), zap.String("peer", w.Peer))
}

// WorkerLost implements cluster.Handler.
func (j *clusterJob) WorkerLost(id string, err error) {
	j.log.Info("worker lost", zap.String("worker", id), zap.Error(err))
	if a := j.current(); a != nil {
		a.workerLost(id, err)
	}
}

// Message implements cluster.Handler.
func (j *clusterJob) Message(id string, m cluster.WorkerMessage) {
	a := j.current()
	switch {
	case a == nil:
	case m.TaskStatus != nil && m.TaskStatus.Attempt == a.n && m.TaskStatus.State == cluster.Running:
		j.ck.coord.TaskRunning(m.TaskStatus.Task)
	case m.TaskStatus != nil && m.TaskStatus.Attempt == a.n:
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

// deploy is the cluster's deployer: it places the tasks on the live
// workers and sends each of them the placement.
func (j *clusterJob) deploy(ctx context.Context, n int, restore *restorePoint) (attempt, error) {
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
	sources, all := j.g.taskKeys()
	a := &clusterAttempt{j: j, n: cluster.Attempt(n), sources: sources, all: all,
		owner: make(map[state.TaskKey]string, len(all)), ended: map[state.TaskKey]error{}, stats: map[state.TaskKey]task.Metrics{},
		lost: map[string]error{}, commits: map[string]string{}, notify: make(chan struct{}, 1)}
	d := &cluster.Deploy{Attempt: a.n, JobID: j.job.String(), DataAddrs: map[string]string{}, CheckpointDir: j.dir, Mode: j.mode}
	for _, k := range all {
		// Subtask i of every vertex goes to the same worker: forward
		// exchanges stay in one process.
		w := workers[k.Subtask%len(workers)]
		a.owner[k] = w.ID
		d.Tasks = append(d.Tasks, cluster.Assignment{Task: k, WorkerID: w.ID})
		d.DataAddrs[w.ID] = w.DataAddr
	}
	if restore != nil {
		dr, ok := restore.reader.(interface{ Dir() string })
		if !ok {
			return nil, errors.New("weir: cluster: the restore point is not in a directory the workers can read")
		}
		d.Restore, d.RestoreDir = state.EncodeMetadata(restore.meta), dr.Dir()
	}
	for id := range d.DataAddrs {
		a.workers = append(a.workers, id)
	}
	slices.Sort(a.workers)
	j.mu.Lock()
	j.cur = a
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

	mu      sync.Mutex
	ended   map[state.TaskKey]error // nil error: finished
	stats   map[state.TaskKey]task.Metrics
	lost    map[string]error  // workers lost during the attempt
	commits map[string]string // worker → Committed's error
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
		err = fmt.Errorf("task %s (subtask %d) on worker %s: %s", s.Task.Vertex, s.Task.Subtask, a.owner[s.Task], s.Error)
	case cluster.Canceled:
		err = context.Canceled
	default:
		return
	}
	a.mu.Lock()
	if _, dup := a.ended[s.Task]; !dup {
		a.ended[s.Task] = err
		if s.Metrics != nil {
			a.stats[s.Task] = s.Metrics.ToTask()
		}
	}
	a.mu.Unlock()
	a.kick()
}

func (a *clusterAttempt) workerLost(id string, err error) {
	a.mu.Lock()
	if _, dup := a.lost[id]; !dup {
		a.lost[id] = err
	}
	a.mu.Unlock()
	a.kick()
}

func (a *clusterAttempt) committed(id, errText string) {
	a.mu.Lock()
	a.commits[id] = errText
	a.mu.Unlock()
	a.kick()
}

func (a *clusterAttempt) taskKeys() (sources, all []state.TaskKey) { return a.sources, a.all }

func (a *clusterAttempt) gateway() coordinator.TaskGateway { return a }

// failure returns why the attempt failed (nil: no failure so far), whether
// every task finished, and the number of tasks that finished.
func (a *clusterAttempt) progress() (failure error, done bool, finished int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range a.workers {
		if err := a.lost[id]; err != nil {
			if failure == nil {
				failure = fmt.Errorf("worker %s lost: %w", id, err)
			}
		}
	}
	for _, k := range a.all {
		err, ok := a.ended[k]
		switch {
		case !ok:
		case err == nil:
			finished++
		case failure == nil && !errors.Is(err, context.Canceled):
			failure = err
		}
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
			return failure
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

// cancel stops the attempt's tasks on every worker and waits, up to
// CancelTimeout, until each ended or its worker was lost.
func (a *clusterAttempt) cancel(cause error) {
	a.j.log.Info("canceling attempt", zap.Uint64("attempt", uint64(a.n)), zap.Error(cause))
	ctx, cancel := context.WithTimeout(context.Background(), a.j.cfg.CancelTimeout)
	defer cancel()
	for _, id := range a.workers {
		if err := a.send(ctx, id, cluster.CoordinatorMessage{CancelAttempt: &cluster.CancelAttempt{Attempt: a.n}}); err != nil {
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
		if _, ok := a.ended[k]; !ok && a.lost[a.owner[k]] == nil {
			return false
		}
	}
	return true
}

// resolveFinal asks every worker of the attempt to commit or abort its
// finished sinks' transactions and waits for the answers.
func (a *clusterAttempt) resolveFinal(commit bool, completed barrier.CheckpointID) error {
	ctx, cancel := context.WithTimeout(context.Background(), a.j.cfg.CancelTimeout)
	defer cancel()
	m := cluster.CoordinatorMessage{Commit: &cluster.Commit{Attempt: a.n, Commit: commit, Completed: completed}}
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
			if e, ok := a.commits[id]; ok {
				if e != "" {
					errs = append(errs, fmt.Errorf("worker %s: %s", id, e))
				}
			} else if err := a.lost[id]; err != nil {
				errs = append(errs, fmt.Errorf("worker %s lost before committing: %w", id, err))
			} else {
				waiting = true
			}
		}
		a.mu.Unlock()
		if !waiting {
			err := errors.Join(errs...)
			if err == nil && commit && a.j.e.final != nil {
				err = a.j.e.final.cleanup()
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
		if m, ok := a.stats[k]; ok {
			ms = append(ms, m)
		}
	}
	return ms
}

// TriggerCheckpoint, NotifyCheckpointComplete and NotifyCheckpointAborted
// implement coordinator.TaskGateway over the control plane.
func (a *clusterAttempt) TriggerCheckpoint(k state.TaskKey, b barrier.Barrier) error {
	return a.send(context.Background(), a.owner[k], cluster.CoordinatorMessage{
		TriggerCheckpoint: &cluster.TriggerCheckpoint{Attempt: a.n, Task: k, Barrier: b}})
}

func (a *clusterAttempt) NotifyCheckpointComplete(k state.TaskKey, id barrier.CheckpointID) {
	a.notifyCheckpoint(k, id, false)
}

func (a *clusterAttempt) NotifyCheckpointAborted(k state.TaskKey, id barrier.CheckpointID) {
	a.notifyCheckpoint(k, id, true)
}

func (a *clusterAttempt) notifyCheckpoint(k state.TaskKey, id barrier.CheckpointID, aborted bool) {
	err := a.send(context.Background(), a.owner[k], cluster.CoordinatorMessage{
		NotifyCheckpoint: &cluster.NotifyCheckpoint{Attempt: a.n, Task: k, ID: id, Aborted: aborted}})
	if err != nil {
		a.j.log.Warn("checkpoint notification not sent", zap.Uint64("checkpoint", uint64(id)), zap.Error(err))
	}
}

// WorkerConfig configures RunWorker.
type WorkerConfig struct {
	// Coordinator is the coordinator's control address (host:port).
	Coordinator string
	// ID names the worker (default: a random UUID). A worker that lost
	// its coordinator may rejoin under the same ID.
	ID string
	// DataListen is the data plane's listen address (default
	// "127.0.0.1:0"); other workers connect to it.
	DataListen string
	// Token must match ClusterConfig.Token.
	Token string
	// TLS, if set, secures the control plane (a client configuration).
	TLS *tls.Config
	// DataTLS, if set, secures the data plane both ways: the worker serves
	// its partitions with DataTLS.Certificates and dials other workers
	// trusting DataTLS.RootCAs (the dialled host is the server name). For
	// mutual TLS set ClientAuth and ClientCAs too; certificates then need
	// both server and client authentication usage. All workers of a job
	// must agree.
	DataTLS *tls.Config
	// HeartbeatInterval and HeartbeatTimeout detect a lost coordinator
	// (defaults 1 s and 5 s).
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
}

// RunWorker runs this process as a worker of the job built in e, whose
// coordinator is another process of the same program running Execute with
// WithCluster: it registers, runs the tasks the coordinator deploys here,
// serves their output to the other workers and reads theirs. It returns
// nil when the coordinator shuts it down (the job ended), ctx.Err() when
// ctx ends, or an error when the coordinator is lost.
func (e *Environment) RunWorker(ctx context.Context, wc WorkerConfig) error {
	if err := e.cfg.validate(); err != nil {
		return err
	}
	if wc.ID == "" {
		wc.ID = uuid.NewString()
	}
	if wc.DataListen == "" {
		wc.DataListen = "127.0.0.1:0"
	}
	g, err := e.buildGraph()
	if err != nil {
		return err
	}
	pool, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: e.cfg.segmentSize, NumSegments: e.cfg.numSegments})
	if err != nil {
		return fmt.Errorf("weir: %w", err)
	}
	token := []byte(wc.Token)
	dp, err := startDataPlane(ctx, wc.DataListen, network.ServerConfig{Token: token, TLS: wc.DataTLS},
		network.ClientConfig{Token: token, TLS: wc.DataTLS}, e.cfg.logger)
	if err != nil {
		return err
	}
	w := &worker{e: e, g: g, pool: pool, dp: dp, id: wc.ID, log: e.cfg.logger.With(zap.String("worker", wc.ID))}
	defer func() {
		w.stopAttempt()
		dp.close()
		if n := pool.InUse(); n != 0 {
			w.log.Error("network segments leaked", zap.Int("segments", n))
		}
	}()
	err = cluster.RunWorker(ctx, cluster.WorkerConfig{Coordinator: wc.Coordinator, TLS: wc.TLS, Token: wc.Token,
		Register:          cluster.Register{WorkerID: wc.ID, DataAddr: dp.addr, Fingerprint: g.fingerprint(&e.cfg)},
		HeartbeatInterval: wc.HeartbeatInterval, HeartbeatTimeout: wc.HeartbeatTimeout, Logger: e.cfg.logger}, w)
	if err != nil && strings.Contains(err.Error(), "fingerprint") {
		return fmt.Errorf("weir: worker: this process built a different job than the coordinator: %w", err)
	}
	return err
}

// worker runs the tasks the coordinator deploys in this process.
type worker struct {
	e    *Environment
	g    *jobGraph
	pool *buffer.GlobalPool
	dp   *dataPlane
	id   string
	log  *zap.Logger
	sess *cluster.Session

	mu  sync.Mutex
	cur *workerAttempt
}

// workerAttempt is the part of one attempt running in this worker.
type workerAttempt struct {
	n      cluster.Attempt
	byKey  map[state.TaskKey]*task.Task
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// Connected implements cluster.WorkerHandler.
func (w *worker) Connected(s *cluster.Session) { w.sess = s }

// Command implements cluster.WorkerHandler.
func (w *worker) Command(ctx context.Context, m cluster.CoordinatorMessage) error {
	switch {
	case m.Deploy != nil:
		w.deploy(ctx, m.Deploy)
	case m.CancelAttempt != nil:
		if a := w.attempt(m.CancelAttempt.Attempt); a != nil {
			a.cancel(errors.New("weir: attempt canceled by the coordinator"))
		}
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
		if w.e.final != nil {
			// The coordinator runs the cleanups once every worker settled.
			if err := w.e.final.settle(c.Commit, c.Completed); err != nil {
				errText = err.Error()
			}
		}
		w.send(ctx, cluster.WorkerMessage{Committed: &cluster.Committed{Attempt: c.Attempt, Error: errText}})
	case m.Shutdown != nil:
		w.log.Info("shutdown", zap.String("reason", m.Shutdown.Reason))
		w.stopAttempt()
	}
	return nil
}

func (w *worker) send(ctx context.Context, m cluster.WorkerMessage) {
	if err := w.sess.Send(ctx, m); err != nil {
		w.log.Warn("message to the coordinator not sent", zap.Error(err))
	}
}

func (w *worker) attempt(n cluster.Attempt) *workerAttempt {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur != nil && w.cur.n == n {
		return w.cur
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
	a := w.cur
	w.mu.Unlock()
	if a != nil {
		a.cancel(errors.New("weir: worker stopping the attempt"))
		<-a.done
	}
}

// deploy starts this worker's part of attempt d.
func (w *worker) deploy(ctx context.Context, d *cluster.Deploy) {
	w.stopAttempt()
	fail := func(keys []state.TaskKey, err error) {
		w.log.Error("deploy failed", zap.Uint64("attempt", uint64(d.Attempt)), zap.Error(err))
		for _, k := range keys {
			w.send(ctx, cluster.WorkerMessage{TaskStatus: &cluster.TaskStatus{Attempt: d.Attempt, Task: k,
				State: cluster.Failed, Error: err.Error()}})
		}
	}
	job, err := uuid.Parse(d.JobID)
	pl := &placement{job: job, attempt: int(d.Attempt), local: map[state.TaskKey]bool{}, remote: map[state.TaskKey]string{}, net: w.dp}
	var mine []state.TaskKey
	for _, as := range d.Tasks {
		if as.WorkerID == w.id {
			pl.local[as.Task] = true
			mine = append(mine, as.Task)
		} else {
			pl.remote[as.Task] = d.DataAddrs[as.WorkerID]
		}
	}
	if err != nil {
		fail(mine, fmt.Errorf("weir: worker: bad job ID: %w", err))
		return
	}
	storage, err := state.NewFileStorage(state.FileStorageConfig{Dir: d.CheckpointDir, Logger: w.log})
	if err != nil {
		fail(mine, fmt.Errorf("weir: worker: checkpoint storage: %w", err))
		return
	}
	var rp *restorePoint
	if d.Restore != nil {
		m, err := state.DecodeMetadata(d.Restore)
		if err != nil {
			fail(mine, fmt.Errorf("weir: worker: restore point: %w", err))
			return
		}
		reader, err := state.NewFileStorage(state.FileStorageConfig{Dir: d.RestoreDir, Logger: w.log})
		if err != nil {
			fail(mine, fmt.Errorf("weir: worker: restore point: %w", err))
			return
		}
		rp = &restorePoint{meta: m, reader: reader}

	}
	tc := &task.CheckpointConfig{Mode: d.Mode, Storage: storage, Responder: &workerResponder{w: w, n: d.Attempt}}
	dep, err := w.e.deploy(w.g, w.pool, tc, rp, pl)
	if err != nil {
		fail(mine, err)
		return
	}
	actx, cancel := context.WithCancelCause(context.Background())
	a := &workerAttempt{n: d.Attempt, byKey: map[state.TaskKey]*task.Task{}, cancel: cancel, done: make(chan struct{})}
	for _, t := range dep.tasks {
		a.byKey[t.Key()] = t
	}
	w.mu.Lock()
	w.cur = a
	w.mu.Unlock()
	go func() {
		defer close(a.done)
		defer cancel(nil)
		_ = runAttemptHook(actx, dep, func(k state.TaskKey, err error) {
			m := cluster.TaskMetricsFrom(a.byKey[k].Metrics())
			s := &cluster.TaskStatus{Attempt: d.Attempt, Task: k, State: cluster.Finished, Metrics: &m}
			switch {
			case err == nil:
			case errors.Is(err, context.Canceled):
				s.State = cluster.Canceled
			default:
				s.State, s.Error = cluster.Failed, err.Error()
			}
			w.send(ctx, cluster.WorkerMessage{TaskStatus: s})
		})
	}()
}

// workerResponder sends a worker's task acknowledgements to the
// coordinator.
type workerResponder struct {
	w *worker
	n cluster.Attempt
}

func (r *workerResponder) Acknowledge(k state.TaskKey, id barrier.CheckpointID, snap state.TaskSnapshot, m task.CheckpointMetrics) {
	r.w.send(context.Background(), cluster.WorkerMessage{Ack: &cluster.Ack{Attempt: r.n, Task: k, ID: id,
		Snapshot: state.EncodeTaskSnapshot(snap), Metrics: cluster.CheckpointMetricsFrom(checkpointMetrics(m))}})
}

func (r *workerResponder) Running(k state.TaskKey) {
	r.w.send(context.Background(), cluster.WorkerMessage{TaskStatus: &cluster.TaskStatus{Attempt: r.n, Task: k, State: cluster.Running}})
}

func (r *workerResponder) Decline(k state.TaskKey, id barrier.CheckpointID, reason error) {
	d := &cluster.Decline{Attempt: r.n, Task: k, ID: id, Reason: reason.Error()}
	var de *barrier.DeclineError
	if errors.As(reason, &de) {
		d.Kind = de.Reason
	}
	r.w.send(context.Background(), cluster.WorkerMessage{Decline: d})
}
