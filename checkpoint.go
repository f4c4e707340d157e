package weir

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// Checkpointing guarantees.
const (
	ExactlyOnce = barrier.ExactlyOnce
	AtLeastOnce = barrier.AtLeastOnce
)

// CheckpointConfig turns on periodic checkpoints. Zero values mean Flink's
// defaults (see coordinator.Config).
type CheckpointConfig struct {
	Interval          time.Duration // required: how often to checkpoint
	Mode              barrier.Mode  // ExactlyOnce (default) or AtLeastOnce
	MinPause          time.Duration
	Timeout           time.Duration // default 10 min
	MaxConcurrent     int           // default 1
	TolerableFailures int           // consecutive failed checkpoints tolerated (default 0)
	Retained          int           // completed checkpoints kept (default 1)
	RetainOnCancel    bool
	// Dir is the checkpoint directory; empty keeps checkpoints in memory
	// (lost with the process). Storage, when set, overrides Dir.
	Dir     string
	Storage state.Storage
}

// CheckpointStats are the coordinator's checkpoint statistics.
type CheckpointStats = coordinator.Stats

// RestartStrategy decides whether and when a failed job restarts.
type RestartStrategy = coordinator.RestartStrategy

func (c *CheckpointConfig) coordinatorConfig() coordinator.Config {
	return coordinator.Config{Interval: c.Interval, Mode: c.Mode, MinPause: c.MinPause, Timeout: c.Timeout,
		MaxConcurrent: c.MaxConcurrent, TolerableFailures: c.TolerableFailures, Retained: c.Retained, RetainOnCancel: c.RetainOnCancel}
}

func (c *CheckpointConfig) validate() error {
	if c.Interval <= 0 {
		return fmt.Errorf("weir: checkpoint interval %v must be positive", c.Interval)
	}
	if err := c.coordinatorConfig().Validate(); err != nil {
		return fmt.Errorf("weir: %w", err)
	}
	return nil
}

// WithCheckpointing turns on periodic checkpoints: a failed job restarts
// from its latest completed checkpoint (see WithRestartStrategy).
func WithCheckpointing(c CheckpointConfig) Option {
	return optionFunc(func(cfg *config) { cfg.ckpt = &c })
}

// WithRestoreFrom starts the job from a savepoint (the path
// Job.TriggerSavepoint returned), a retained checkpoint (a chk-N directory)
// or the newest valid checkpoint of a checkpoint directory. Operators are
// matched by their UIDs (see Stream.UID); sources resume from their saved
// positions. It needs WithCheckpointing. The restore point is only read:
// retention never deletes it unless it lies in the job's own checkpoint
// directory.
func WithRestoreFrom(path string) Option {
	return optionFunc(func(cfg *config) { cfg.restoreFrom = path })
}

// WithRestartStrategy sets how a failed job restarts (default with
// checkpointing: fixed delay, unlimited attempts, no delay would spin, so
// 10 attempts with 100 ms delay; without checkpointing: no restart).
func WithRestartStrategy(s RestartStrategy) Option {
	return optionFunc(func(cfg *config) { cfg.restart = s })
}

// checkpointing is one job's checkpoint machinery shared by its attempts.
type checkpointing struct {
	coord   *coordinator.CheckpointCoordinator
	storage state.Storage
	mode    barrier.Mode
	from    *restorePoint // the job's starting point (WithRestoreFrom), or nil

	mu            sync.Mutex
	cancelAttempt context.CancelCauseFunc // of the running attempt
}

func (ck *checkpointing) taskConfig() *task.CheckpointConfig {
	return &task.CheckpointConfig{Mode: ck.mode, Storage: ck.storage, Responder: responder{ck.coord}}
}

// responder adapts the coordinator to task.CheckpointResponder.
type responder struct {
	c *coordinator.CheckpointCoordinator
}

func (r responder) Acknowledge(k state.TaskKey, id barrier.CheckpointID, snap state.TaskSnapshot, m task.CheckpointMetrics) {
	r.c.Acknowledge(k, id, snap, checkpointMetrics(m))
}

func (r responder) Running(k state.TaskKey) { r.c.TaskRunning(k) }

func (r responder) Decline(k state.TaskKey, id barrier.CheckpointID, reason error) {
	r.c.Decline(k, id, reason)
}

func checkpointMetrics(m task.CheckpointMetrics) coordinator.TaskCheckpointMetrics {
	return coordinator.TaskCheckpointMetrics{AlignmentDuration: m.AlignmentDuration,
		StartDelay: m.StartDelay, SyncDuration: m.SyncDuration, AsyncDuration: m.AsyncDuration, StateSize: m.StateSize}
}

// restoreConfig extracts what one vertex needs from a restore point. Each
// operator's subtask states are in subtask order, so that every subtask
// (in whatever process) sees the same order when operator state is
// redistributed.
func restoreConfig(rp *restorePoint, vertex string) *task.RestoreConfig {
	rc := &task.RestoreConfig{ID: rp.meta.ID, Operators: map[string][]state.OperatorSubtaskState{}, Reader: rp.reader}
	var keys []state.TaskKey
	for k := range rp.meta.Tasks {
		if k.Vertex == vertex {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b state.TaskKey) int { return cmp.Compare(a.Subtask, b.Subtask) })
	for _, k := range keys {
		for op, s := range rp.meta.Tasks[k].Operators {
			rc.Operators[op] = append(rc.Operators[op], s)
		}
	}
	return rc
}

// newCheckpointing sets up the job's checkpoint storage and coordinator and
// opens the restore point, if the job starts from one. cleanup removes
// what only this run needed (a private checkpoint directory).
func (e *Environment) newCheckpointing() (_ *checkpointing, _ func(), err error) {
	cc := e.cfg.ckpt
	cleanup := func() {}
	storage := cc.Storage
	if storage == nil {
		dir := cc.Dir
		if dir == "" {
			// A private directory, removed when the job ends: checkpoints
			// do not outlive the process, savepoints (exported elsewhere)
			// do.
			tmp, err := os.MkdirTemp("", "weir-checkpoints-*")
			if err != nil {
				return nil, nil, fmt.Errorf("weir: checkpoint storage: %w", err)
			}
			dir, cleanup = tmp, func() { os.RemoveAll(tmp) }
		}
		if storage, err = state.NewFileStorage(state.FileStorageConfig{Dir: dir, Logger: e.cfg.logger}); err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("weir: checkpoint storage: %w", err)
		}
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	ck := &checkpointing{storage: storage, mode: cc.Mode}
	var claim bool
	if e.cfg.restoreFrom != "" {
		rp, c, err := openRestorePoint(e.cfg.restoreFrom, storage, e.cfg.logger)
		if err != nil {
			return nil, nil, err
		}
		ck.from, claim = rp, c
		e.cfg.logger.Info("restoring", zap.String("from", e.cfg.restoreFrom),
			zap.Uint64("checkpoint", uint64(rp.meta.ID)), zap.Stringer("kind", rp.meta.Kind))
	}
	opts := []coordinator.Option{
		coordinator.WithLogger(e.cfg.logger),
		coordinator.OnFailure(func(err error) { ck.failAttempt(err) }),
	}
	if fs, ok := storage.(*state.FileStorage); ok {
		// Continue after checkpoints an earlier run left in the directory
		// instead of overwriting them.
		if ids, err := fs.Checkpoints(); err == nil && len(ids) > 0 {
			opts = append(opts, coordinator.WithFirstCheckpointID(ids[0]+1))
		}
	}
	if ck.coord, err = coordinator.New(cc.coordinatorConfig(), storage, opts...); err != nil {
		return nil, nil, fmt.Errorf("weir: %w", err)
	}
	if ck.from != nil {
		if err := ck.coord.Restore(ck.from.meta, claim); err != nil {
			return nil, nil, fmt.Errorf("weir: %w", err)
		}
	}
	return ck, cleanup, nil
}

// restorePoint is a completed checkpoint or savepoint and the storage that
// reads its state files.
type restorePoint struct {
	meta   state.Metadata
	reader state.StateReader
}

// openRestorePoint opens path, which is a savepoint directory, a
// checkpoint directory (chk-N) or a checkpoint storage directory (its
// newest checkpoint whose files all verify). claim reports a checkpoint of
// own, the job's own storage: it is subject to retention; anything else is
// only read.
func openRestorePoint(path string, own state.Storage, log *zap.Logger) (rp *restorePoint, claim bool, err error) {
	fail := func(err error) (*restorePoint, bool, error) {
		return nil, false, fmt.Errorf("weir: restore from %s: %w", path, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fail(err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return fail(err)
	}
	if !fi.IsDir() {
		return fail(errors.New("not a directory"))
	}
	ownDir := ""
	if fs, ok := own.(*state.FileStorage); ok && fs.Dir() != "" {
		ownDir, _ = filepath.Abs(fs.Dir())
	}
	base := filepath.Base(abs)
	if v, ok := strings.CutPrefix(base, "chk-"); ok {
		id, perr := strconv.ParseUint(v, 10, 64)
		if perr != nil || id == 0 {
			return fail(errors.New("not a checkpoint directory"))
		}
		parent := filepath.Dir(abs)
		fs, err := state.NewFileStorage(state.FileStorageConfig{Dir: parent, Logger: log})
		if err != nil {
			return fail(err)
		}
		m, err := fs.ReadMetadata(barrier.CheckpointID(id))
		if err != nil {
			return fail(err)
		}
		for _, h := range m.StreamHandles() {
			if err := fs.VerifyState(h); err != nil {
				return fail(err)
			}
		}
		if parent == ownDir {
			return &restorePoint{meta: m, reader: own}, true, nil
		}
		return &restorePoint{meta: m, reader: fs}, false, nil
	}
	if _, err := os.Stat(filepath.Join(abs, state.MetadataFile)); err == nil {
		m, sp, err := state.OpenSavepoint(abs, log)
		if err != nil {
			return fail(err)
		}
		return &restorePoint{meta: m, reader: sp}, false, nil
	}
	// A checkpoint storage directory: its newest good checkpoint.
	if abs == ownDir {
		m, err := own.Latest()
		if err != nil {
			return fail(err)
		}
		return &restorePoint{meta: m, reader: own}, true, nil
	}
	fs, err := state.NewFileStorage(state.FileStorageConfig{Dir: abs, Logger: log})
	if err != nil {
		return fail(err)
	}
	m, err := fs.Latest()
	if err != nil {
		return fail(err)
	}
	return &restorePoint{meta: m, reader: fs}, false, nil
}

// failAttempt fails the running attempt (too many failed checkpoints).
func (ck *checkpointing) failAttempt(err error) {
	ck.mu.Lock()
	cancel := ck.cancelAttempt
	ck.mu.Unlock()
	if cancel != nil {
		cancel(err)
	}
}

// restorePointFor returns where a (re)started attempt restores from.
func (ck *checkpointing) restorePointFor() *restorePoint {
	m, ok := ck.coord.LatestCompleted()
	if !ok {
		return nil
	}
	if ck.from != nil && m.ID == ck.from.meta.ID {
		return ck.from
	}
	return &restorePoint{meta: m, reader: ck.storage}
}

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
}

// deployer deploys attempt n from restore (nil: from scratch).
type deployer func(ctx context.Context, n int, restore *restorePoint) (attempt, error)

// localAttempt is an attempt whose tasks all run in this process.
type localAttempt struct {
	d     *deployment
	byKey map[state.TaskKey]*task.Task
	final *finalCommits // nil: no sink commits at the end
}

func newLocalAttempt(d *deployment, final *finalCommits) *localAttempt {
	a := &localAttempt{d: d, byKey: make(map[state.TaskKey]*task.Task, len(d.tasks)), final: final}
	for _, t := range d.tasks {
		a.byKey[t.Key()] = t
	}
	return a
}

func (a *localAttempt) taskKeys() (sources, all []state.TaskKey) {
	for _, t := range a.d.tasks {
		all = append(all, t.Key())
		if t.IsSource() {
			sources = append(sources, t.Key())
		}
	}
	return sources, all
}

func (a *localAttempt) gateway() coordinator.TaskGateway { return a }

func (a *localAttempt) run(ctx context.Context, ended func(error)) error {
	return runAttemptHook(ctx, a.d, func(_ state.TaskKey, err error) { ended(err) })
}

func (a *localAttempt) resolveFinal(commit bool, completed barrier.CheckpointID) error {
	if a.final == nil {
		return nil
	}
	return a.final.resolve(commit, completed)
}

func (a *localAttempt) metrics() []task.Metrics { return collectMetrics(a.d) }

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

// runWithCheckpointing runs the job attempt by attempt: each failure
// restarts every task from the latest completed checkpoint, as long as the
// restart strategy allows.
func (e *Environment) runWithCheckpointing(ctx context.Context, ck *checkpointing, deploy deployer, res *Result) error {
	restart := e.cfg.restart
	if restart == nil {
		fd, err := coordinator.NewFixedDelay(coordinator.FixedDelayConfig{Attempts: 10, Delay: 100 * time.Millisecond})
		if err != nil {
			return err
		}
		restart = fd
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	coord := ck.coord

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = coord.Run(ctx)
	}()
	defer func() {
		cancel(nil)
		wg.Wait()
		coord.Close()
		res.Checkpoints = new(coordinator.Stats)
		*res.Checkpoints = coord.Stats()
	}()

	for {
		a, err := deploy(ctx, res.Restarts, ck.restorePointFor())
		if err != nil {
			return err
		}
		actx, acancel := context.WithCancelCause(ctx)
		ck.mu.Lock()
		ck.cancelAttempt = acancel
		ck.mu.Unlock()
		sources, all := a.taskKeys()
		if err := coord.Attach(sources, all, a.gateway()); err != nil {
			acancel(nil)
			return fmt.Errorf("weir: %w", err)
		}
		var once sync.Once
		err = a.run(actx, func(err error) {
			once.Do(func() {
				if err == nil {
					// A bounded job is ending: no further checkpoint can
					// complete.
					err = errors.New("weir: job finishing")
				}
				// A failing attempt takes no more checkpoints while its
				// tasks stop (Flink suspends the scheduler on failover).
				coord.Detach(err)
			})
		})
		if cause := context.Cause(actx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause
		}
		acancel(nil)
		coord.Detach(err)
		res.Tasks = a.metrics()
		if err == nil {
			if cerr := a.resolveFinal(true, 0); cerr != nil {
				return fmt.Errorf("weir: final commit: %w", cerr)
			}
			_ = coord.Shutdown(coordinator.JobFinished)
			return nil
		}
		var upTo barrier.CheckpointID
		if m, ok := coord.LatestCompleted(); ok {
			upTo = m.ID
		}
		_ = a.resolveFinal(false, upTo)
		if ctx.Err() != nil {
			_ = coord.Shutdown(coordinator.JobCanceled)
			return err
		}
		delay, ok := restart.Next(time.Now())
		if !ok {
			_ = coord.Shutdown(coordinator.JobFailed)
			return fmt.Errorf("weir: job failed and will not restart: %w", err)
		}
		e.cfg.logger.Sugar().Warnw("job failed; restarting from the latest checkpoint", "error", err, "delay", delay)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			_ = coord.Shutdown(coordinator.JobCanceled)
			return err
		}
		res.Restarts++
	}
}
