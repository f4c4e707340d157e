package coordinator

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/clock"
	"github.com/weirstream/weir/state"
)

// TaskGateway reaches the tasks of one deployed job attempt. The
// coordinator calls it from one goroutine at a time, never with a lock
// held, so an implementation may call back into the coordinator
// (Acknowledge, Decline) synchronously.
type TaskGateway interface {
	// TriggerCheckpoint starts checkpoint b at a source task. An error
	// aborts the checkpoint (it does not count as a checkpoint failure).
	TriggerCheckpoint(task state.TaskKey, b barrier.Barrier) error
	// NotifyCheckpointComplete tells a task that checkpoint id completed
	// (two-phase-commit sinks commit now).
	NotifyCheckpointComplete(task state.TaskKey, id barrier.CheckpointID)
	// NotifyCheckpointAborted tells a task that checkpoint id was aborted.
	NotifyCheckpointAborted(task state.TaskKey, id barrier.CheckpointID)
}

// Storage is the part of checkpoint storage the coordinator uses
// (state's storages implement it). Calls are serialized, in the order the
// coordinator decided them, on a goroutine of their own: a slow store
// delays no trigger, acknowledgement or timeout.
type Storage interface {
	// WriteMetadata writes m durably; it makes checkpoint m.ID complete.
	WriteMetadata(m state.Metadata) error
	// Discard removes checkpoint id and its files; missing is no error.
	Discard(id barrier.CheckpointID) error
	// ExportSavepoint writes a self-contained savepoint under dir and
	// returns its path.
	ExportSavepoint(m state.Metadata, dir string) (string, error)
}

// An Option configures a CheckpointCoordinator.
type Option interface{ apply(*CheckpointCoordinator) }

type optionFunc func(*CheckpointCoordinator)

func (f optionFunc) apply(c *CheckpointCoordinator) { f(c) }

// WithLogger sets the logger (nil: no logging).
func WithLogger(l *zap.Logger) Option {
	return optionFunc(func(c *CheckpointCoordinator) {
		if l == nil {
			l = zap.NewNop()
		}
		c.log = l
	})
}

// WithClock sets the clock that drives the scheduler and timeouts
// (default: the real clock).
func WithClock(clk clock.Clock) Option {
	return optionFunc(func(c *CheckpointCoordinator) {
		if clk != nil {
			c.clock = clk
		}
	})
}

// WithRandSeed seeds the random initial delay of the periodic scheduler
// (default: a random seed).
func WithRandSeed(seed uint64) Option {
	return optionFunc(func(c *CheckpointCoordinator) {
		c.rnd = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	})
}

// WithFirstCheckpointID makes checkpoint IDs start at id (default 1): a job
// whose storage already holds checkpoints of an earlier run starts past
// them instead of overwriting them.
func WithFirstCheckpointID(id barrier.CheckpointID) Option {
	return optionFunc(func(c *CheckpointCoordinator) {
		if id > 0 {
			c.firstID = id
		}
	})
}

// OnFailure sets the function told when the job must fail because too many
// consecutive checkpoints failed (the error wraps ErrTooManyFailures). The
// job runner should fail the job, Detach, and restart it per its
// RestartStrategy. It is called without any lock held. Default: the failure
// is only logged.
func OnFailure(f func(error)) Option {
	return optionFunc(func(c *CheckpointCoordinator) { c.onFailure = f })
}

type result struct {
	meta state.Metadata
	path string
	err  error
}

// CheckpointCoordinator is the job-manager side of checkpointing: it
// triggers checkpoints at the source tasks, collects every task's
// acknowledgement, makes completed checkpoints durable, keeps the newest
// ones, and tells the tasks the outcome. It is safe for concurrent use.
//
// It wraps a pure state machine (no goroutines, clocks or I/O inside);
// Run fires timers and carries out the machine's decisions in order: the
// gateway calls itself, the storage calls through a queue drained by a
// goroutine of their own (started while it is not empty, waited for by
// Close), whose results feed the machine.
type CheckpointCoordinator struct {
	storage   Storage
	log       *zap.Logger
	clock     clock.Clock
	rnd       *rand.Rand // guarded by mu
	onFailure func(error)
	firstID   barrier.CheckpointID

	wake     chan struct{} // buffered(1): the core has effects or a new deadline
	done     chan struct{} // closed when shutdown starts
	finished chan struct{} // closed when shutdown has finished

	// Lock order: mu is a leaf; it is never held while calling out.
	mu struct {
		sync.Mutex
		core     *core
		out      []effect
		draining bool
		waiters  map[requestID]chan result
		nextReq  requestID
		// io holds the storage calls (persist, discard) not yet made, in
		// order; ioDone is closed when the goroutine making them, started
		// while io is not empty, exits (nil: none runs).
		io        []effect
		ioDone    chan struct{}
		running   bool
		runExited chan struct{}
		closed    bool
	}
}

// New returns a coordinator for one job. It starts nothing: Attach an
// attempt and call Run. It returns an error if cfg is invalid (see
// Config.Validate) or storage is nil.
func New(cfg Config, storage Storage, opts ...Option) (*CheckpointCoordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if storage == nil {
		return nil, errors.New("coordinator: nil storage")
	}
	c := &CheckpointCoordinator{
		storage:  storage,
		log:      zap.NewNop(),
		clock:    clock.Real(),
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		finished: make(chan struct{}),
	}
	for _, o := range opts {
		o.apply(c)
	}
	if c.rnd == nil {
		c.rnd = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	c.mu.core = newCore(cfg)
	c.mu.core.nextID = max(c.mu.core.nextID, c.firstID)
	c.mu.waiters = make(map[requestID]chan result)
	return c, nil
}

// Run fires the periodic scheduler and checkpoint timeouts, and carries out
// the coordinator's calls to tasks and storage. It blocks until ctx is done
// or the coordinator is closed, and then returns nil. It returns ErrClosed
// after Close and ErrRunning if Run is already running.
func (c *CheckpointCoordinator) Run(ctx context.Context) error {
	c.mu.Lock()
	switch {
	case c.mu.closed:
		c.mu.Unlock()
		return ErrClosed
	case c.mu.running:
		c.mu.Unlock()
		return ErrRunning
	}
	c.mu.running = true
	exited := make(chan struct{})
	c.mu.runExited = exited
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.mu.running = false
		c.mu.Unlock()
		close(exited)
	}()

	timer := c.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c.drain()
		c.mu.Lock()
		deadline, ok := c.mu.core.nextDeadline()
		c.mu.Unlock()
		if ok {
			timer.Reset(max(0, deadline.Sub(c.clock.Now())))
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.done:
			return nil
		case <-c.wake:
		case <-timer.C():
			now := c.clock.Now()
			c.mu.Lock()
			c.mu.core.tick(now)
			c.moveEffectsLocked()
			c.mu.Unlock()
		}
	}
}

// Close stops the coordinator: pending checkpoints are aborted, waiting
// triggers fail with ErrClosed, Run returns, and completed checkpoints are
// kept (as for a suspended job). It waits for Run and for the last calls to
// tasks and storage. It is idempotent and always returns nil.
func (c *CheckpointCoordinator) Close() error {
	c.shutdown(JobSuspended)
	return nil
}

// Shutdown is Close for a job that ended with status: completed
// checkpoints are deleted or kept per Config.RetainOnCancel (see
// JobStatus). It returns ErrClosed, and changes nothing, if the coordinator
// was already closed.
func (c *CheckpointCoordinator) Shutdown(status JobStatus) error {
	if !c.shutdown(status) {
		return ErrClosed
	}
	return nil
}

func (c *CheckpointCoordinator) shutdown(status JobStatus) bool {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		<-c.finished
		return false
	}
	c.mu.closed = true
	c.mu.core.shutdown(status, c.clock.Now())
	c.moveEffectsLocked()
	exited := c.mu.runExited
	running := c.mu.running
	c.mu.Unlock()
	close(c.done)
	if running {
		<-exited
	}
	// The outbox and the storage calls feed each other (a metadata write's
	// result brings notifications, a completion brings discards): carry
	// out both until neither has work left.
	for {
		c.drain()
		c.mu.Lock()
		done, pending := c.mu.ioDone, len(c.mu.out) > 0
		c.mu.Unlock()
		if done == nil && !pending {
			break
		}
		if done != nil {
			<-done
		}
	}
	close(c.finished)
	return true
}

// Attach starts (or resumes) checkpointing for a newly deployed job
// attempt: sources are the tasks that receive triggers, all the tasks that
// must acknowledge (sources included), gw reaches them. The first periodic
// checkpoint is due after a random delay in [MinPause, Interval], and
// starts once every task reported TaskRunning. It
// returns ErrAttached if an attempt is attached, ErrClosed after Close,
// or an error for an empty or inconsistent task list.
func (c *CheckpointCoordinator) Attach(sources, all []state.TaskKey, gw TaskGateway, opts ...AttachOption) error {
	a, err := newAttempt(sources, all, gw)
	if err != nil {
		return err
	}
	for _, o := range opts {
		o.applyAttach(a)
	}
	c.mu.Lock()
	cfg := c.mu.core.cfg
	delay := cfg.MinPause
	if cfg.Interval > cfg.MinPause {
		delay += time.Duration(c.rnd.Int64N(int64(cfg.Interval-cfg.MinPause) + 1))
	}
	err = c.mu.core.attach(a, c.clock.Now(), delay)
	c.unlockAndKick()
	if err == nil {
		c.log.Info("checkpointing attached", zap.Int("tasks", len(all)),
			zap.Int("sources", len(sources)), zap.Duration("first_delay", delay))
	}
	return err
}

// An AttachOption describes more of an attempt to Attach.
type AttachOption interface{ applyAttach(*attempt) }

type attachFunc func(*attempt)

func (f attachFunc) applyAttach(a *attempt) { f(a) }

// WithUpstream gives the attempt's topology: the upstream tasks of each
// task (sources have none). With it, once every upstream task of a task
// has finished, checkpoints trigger that task directly, as they trigger
// sources (Flink's checkpoints after tasks finished); without it only
// sources are triggered.
func WithUpstream(upstream map[state.TaskKey][]state.TaskKey) AttachOption {
	return attachFunc(func(a *attempt) { a.upstream = upstream })
}

// Operator is one operator of a vertex: its ID, name and kind.
type Operator struct {
	ID, Name, Kind string
}

// WithOperators gives the operators of each vertex (by vertex ID):
// checkpoints then record each operator of a finished task as finished
// (state.OperatorSubtaskState.Finished), so that a job restored from them
// finds them finished by operator, wherever they then run. Without it a
// finished task is recorded with no operators.
func WithOperators(ops map[string][]Operator) AttachOption {
	return attachFunc(func(a *attempt) { a.operators = ops })
}

// TaskFinished reports that task, of the attached attempt, finished (its
// input ended and it sent its end of partition; FLIP-147). It is no
// longer triggered nor expected to acknowledge; later checkpoints record
// it as finished, so that a job restored from them does not run it
// again. A pending checkpoint it did not acknowledge is aborted (not
// counted as a failure). Safe to call from any goroutine.
func (c *CheckpointCoordinator) TaskFinished(task state.TaskKey) {
	c.mu.Lock()
	c.mu.core.taskFinished(task, c.clock.Now())
	c.unlockAndKick()
}

// TaskFinishing reports that task's input ended and that it waits for a
// final checkpoint before it finishes (a two-phase-commit sink commits
// what it holds when that checkpoint completes): the next checkpoint is
// due at once, subject to MinPause and MaxConcurrent. Safe to call from
// any goroutine.
func (c *CheckpointCoordinator) TaskFinishing(task state.TaskKey) {
	c.mu.Lock()
	c.mu.core.taskFinishing(task, c.clock.Now())
	c.unlockAndKick()
}

// Detach ends the attached attempt: it failed (reason says why) or
// finished (reason nil). Every pending checkpoint and queued trigger is
// aborted, with ErrDetached wrapping reason after a failure and with
// ErrJobFinished after the end (counted Aborted, not Failed), and the
// periodic scheduler pauses until the next Attach.
// Checkpoint IDs keep growing across attempts. Detach without an attached
// attempt does nothing.
func (c *CheckpointCoordinator) Detach(reason error) {
	c.mu.Lock()
	ok := c.mu.core.detach(reason, c.clock.Now())
	c.unlockAndKick()
	switch {
	case ok && reason == nil:
		c.log.Info("checkpointing ended with the job attempt")
	case ok && errors.Is(reason, ErrJobCanceled):
		c.log.Info("checkpointing stopped: the job was canceled")
	case ok:
		c.log.Info("checkpointing stopped for the failed attempt", zap.Error(reason))
	}
}

// Restore seeds the coordinator with the checkpoint or savepoint the job
// starts from: it becomes the latest completed restore point and the next
// checkpoint ID follows m.ID. A claimed checkpoint (one in this
// coordinator's own Storage) is subject to retention like any other; a
// savepoint or an unclaimed checkpoint is never discarded. Call it before
// Attach (ErrAttached otherwise).
func (c *CheckpointCoordinator) Restore(m state.Metadata, claim bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.mu.core.restore(m, claim)
	c.moveEffectsLocked() // retention may discard; Run carries it out
	return err
}

// ContinueAfter makes the next checkpoint ID follow id, if it does not
// already: a coordinator taking over a job from another process continues
// after every ID the other may have used. Call it before Attach.
func (c *CheckpointCoordinator) ContinueAfter(id barrier.CheckpointID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.core.nextID = max(c.mu.core.nextID, id+1)
}

// LatestCompleted returns the restore point for a failover: the newest
// completed checkpoint, or the restored checkpoint or savepoint if none has
// completed since. Savepoints triggered through TriggerSavepoint are not
// restore points (as in Flink since 1.15).
func (c *CheckpointCoordinator) LatestCompleted() (state.Metadata, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.core.latest()
}

// Stats returns a snapshot of the checkpoint statistics.
func (c *CheckpointCoordinator) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.core.statsSnapshot(c.clock.Now())
}

// Acknowledge records that task completed its part of checkpoint id. An
// acknowledgement for a checkpoint that is no longer pending (aborted,
// timed out) has its state discarded; duplicates and unknown tasks or IDs
// are ignored. Safe to call from any goroutine.
func (c *CheckpointCoordinator) Acknowledge(task state.TaskKey, id barrier.CheckpointID, snap state.TaskSnapshot, m TaskCheckpointMetrics) {
	c.mu.Lock()
	outcome := c.mu.core.ack(task, id, snap, m, c.clock.Now())
	c.unlockAndKick()
	if outcome != ackAccepted && outcome != ackLast {
		c.log.Debug("acknowledgement ignored", zap.Uint64("checkpoint", uint64(id)),
			zap.String("vertex", task.Vertex), zap.Int("subtask", task.Subtask),
			zap.Stringer("outcome", outcome))
	}
}

// TaskRunning reports that task, of the attached attempt, is running (its
// state restored, about to process input). No checkpoint or savepoint is
// triggered before every task of the attempt reported it (Flink's
// NOT_ALL_REQUIRED_TASKS_RUNNING check): a periodic trigger that comes due
// earlier waits, and so do manual requests. Reports for tasks of no
// attached attempt are ignored. Safe to call from any goroutine.
func (c *CheckpointCoordinator) TaskRunning(task state.TaskKey) {
	c.mu.Lock()
	c.mu.core.taskRunning(task, c.clock.Now())
	c.unlockAndKick()
}

// Decline aborts checkpoint id because task could not take it. It counts
// as a failed checkpoint unless reason is a *barrier.DeclineError whose
// reason does not (a task not ready yet, finished, canceled; see
// barrier.DeclineReason). Declines of checkpoints no longer pending are
// ignored. Safe to call from any goroutine.
func (c *CheckpointCoordinator) Decline(task state.TaskKey, id barrier.CheckpointID, reason error) {
	c.mu.Lock()
	ok := c.mu.core.decline(task, id, reason, c.clock.Now())
	c.unlockAndKick()
	if ok {
		c.log.Info("checkpoint declined", zap.Uint64("checkpoint", uint64(id)),
			zap.String("vertex", task.Vertex), zap.Int("subtask", task.Subtask), zap.Error(reason))
	}
}

// TriggerCheckpoint triggers a checkpoint now, or as soon as fewer than
// MaxConcurrent are in progress (it does not wait for MinPause), and blocks
// until it completes or fails. A failure is a *CheckpointError. If ctx
// ends first, a trigger still waiting is withdrawn and ctx.Err() returned.
// It returns ErrNotAttached without an attempt and ErrClosed after Close.
func (c *CheckpointCoordinator) TriggerCheckpoint(ctx context.Context) (state.Metadata, error) {
	r, err := c.await(ctx, request{kind: barrier.Checkpoint})
	return r.meta, err
}

// TriggerSavepoint triggers a savepoint now (savepoints are neither held
// back by MaxConcurrent or MinPause nor counted as checkpoint failures),
// exports it into dir through Storage.ExportSavepoint, and returns the
// path. Errors as for TriggerCheckpoint.
func (c *CheckpointCoordinator) TriggerSavepoint(ctx context.Context, dir string) (string, error) {
	if dir == "" {
		return "", errors.New("coordinator: savepoint needs a target directory")
	}
	r, err := c.await(ctx, request{kind: barrier.Savepoint, dir: dir})
	return r.path, err
}

// StopWithSavepoint is TriggerSavepoint for a job that stops at the
// savepoint (Flink's stop-with-savepoint): from the trigger on, no other
// checkpoint starts, so nothing after the savepoint is committed; once it
// completed the tasks are told (transactional sinks commit up to it) and
// it is the restore point should the job fail before it ended. The caller
// then cancels the job. If the savepoint fails, periodic checkpointing
// resumes and the job goes on. It returns ErrStopping while another stop
// is in progress.
func (c *CheckpointCoordinator) StopWithSavepoint(ctx context.Context, dir string) (string, error) {
	if dir == "" {
		return "", errors.New("coordinator: savepoint needs a target directory")
	}
	r, err := c.await(ctx, request{kind: barrier.Savepoint, dir: dir, terminal: true})
	return r.path, err
}

func (c *CheckpointCoordinator) await(ctx context.Context, r request) (result, error) {
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	c.mu.Lock()
	switch {
	case c.mu.closed:
		c.mu.Unlock()
		return result{}, ErrClosed
	case c.mu.core.att == nil:
		c.mu.Unlock()
		return result{}, ErrNotAttached
	}
	c.mu.nextReq++
	r.id = c.mu.nextReq
	ch := make(chan result, 1)
	c.mu.waiters[r.id] = ch
	c.mu.core.request(r, c.clock.Now())
	c.unlockAndKick()

	select {
	case res := <-ch:
		return res, res.err
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.mu.waiters, r.id)
		c.mu.core.cancelRequest(r.id)
		c.mu.Unlock()
		return result{}, ctx.Err()
	}
}

// moveEffectsLocked takes the core's effects into the outbox.
func (c *CheckpointCoordinator) moveEffectsLocked() {
	c.mu.out = append(c.mu.out, c.mu.core.ready()...)
}

// unlockAndKick moves the core's effects to the outbox, unlocks, and has
// them carried out: by Run while it runs (and reconsiders its timer), or
// right here once the coordinator is closed.
func (c *CheckpointCoordinator) unlockAndKick() {
	c.moveEffectsLocked()
	inline := c.mu.closed && !c.mu.running
	c.mu.Unlock()
	if inline {
		c.drain()
		return
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// drain carries out the outbox in order. One goroutine drains at a time;
// a nested or concurrent call returns at once, and the draining goroutine
// picks up what it added.
func (c *CheckpointCoordinator) drain() {
	c.mu.Lock()
	if c.mu.draining {
		c.mu.Unlock()
		return
	}
	c.mu.draining = true
	for len(c.mu.out) > 0 {
		effs := c.mu.out
		c.mu.out = nil
		c.mu.Unlock()
		for _, e := range effs {
			c.execute(e)
		}
		c.mu.Lock()
	}
	c.mu.draining = false
	c.mu.Unlock()
}

func (c *CheckpointCoordinator) execute(e effect) {
	switch e := e.(type) {
	case triggerTask:
		if err := e.gw.TriggerCheckpoint(e.task, e.barrier); err != nil {
			c.log.Warn("checkpoint trigger failed", zap.Uint64("checkpoint", uint64(e.barrier.ID)),
				zap.String("vertex", e.task.Vertex), zap.Int("subtask", e.task.Subtask), zap.Error(err))
			c.mu.Lock()
			c.mu.core.triggerFailed(e.task, e.barrier.ID, err, c.clock.Now())
			c.moveEffectsLocked()
			c.mu.Unlock()
		}
	case notifyComplete:
		e.gw.NotifyCheckpointComplete(e.task, e.id)
	case notifyAborted:
		e.gw.NotifyCheckpointAborted(e.task, e.id)
	case persist, discard:
		c.mu.Lock()
		if c.mu.closed && !c.mu.running && c.mu.ioDone == nil {
			// Nothing else waits on this goroutine any more: the call
			// is made right here, as after Close every effect is.
			c.mu.Unlock()
			c.callStorage(e)
			return
		}
		c.mu.io = append(c.mu.io, e)
		if c.mu.ioDone == nil {
			done := make(chan struct{})
			c.mu.ioDone = done
			go c.runStorage(done)
		}
		c.mu.Unlock()
	case resolve:
		c.mu.Lock()
		ch := c.mu.waiters[e.req]
		delete(c.mu.waiters, e.req)
		c.mu.Unlock()
		if ch != nil {
			ch <- result{meta: e.meta, path: e.path, err: e.err}
		}
	case failJob:
		c.log.Error("failing the job", zap.Error(e.err))
		if c.onFailure != nil {
			c.onFailure(e.err)
		}
	default:
		panic("coordinator: unknown effect")
	}
}

// runStorage makes the queued storage calls in order, feeding each
// result back into the core, until the queue is empty; then it closes
// done and exits. The next storage effect starts it again.
func (c *CheckpointCoordinator) runStorage(done chan struct{}) {
	defer close(done)
	c.mu.Lock()
	for len(c.mu.io) > 0 {
		e := c.mu.io[0]
		c.mu.io = c.mu.io[1:]
		c.mu.Unlock()
		c.callStorage(e)
		c.mu.Lock()
	}
	c.mu.ioDone = nil
	c.mu.Unlock()
}

// callStorage makes one storage call; a persist's result goes into the
// core, and its effects to whoever drains the outbox.
func (c *CheckpointCoordinator) callStorage(e effect) {
	switch e := e.(type) {
	case persist:
		var path string
		var err error
		if e.meta.Kind == barrier.Savepoint {
			path, err = c.storage.ExportSavepoint(e.meta, e.dir)
		} else {
			err = c.storage.WriteMetadata(e.meta)
		}
		if err != nil {
			c.log.Warn("checkpoint finalization failed", zap.Uint64("checkpoint", uint64(e.meta.ID)), zap.Error(err))
		} else {
			c.log.Info("checkpoint completed", zap.Uint64("checkpoint", uint64(e.meta.ID)),
				zap.Stringer("kind", e.meta.Kind), zap.String("path", path))
		}
		c.mu.Lock()
		c.mu.core.persisted(e.meta.ID, path, err, c.clock.Now())
		c.unlockAndKick()
	case discard:
		if err := c.storage.Discard(e.id); err != nil {
			c.log.Warn("discarding checkpoint failed", zap.Uint64("checkpoint", uint64(e.id)), zap.Error(err))
		}
	default:
		panic("coordinator: not a storage effect")
	}
}
