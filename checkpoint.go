package weir

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/buffer"
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

	mu    sync.Mutex
	tasks map[state.TaskKey]*task.Task
}

func (ck *checkpointing) taskConfig() *task.CheckpointConfig {
	return &task.CheckpointConfig{Mode: ck.mode, Storage: ck.storage, Responder: responder{ck.coord}}
}

// responder adapts the coordinator to task.CheckpointResponder.
type responder struct {
	c *coordinator.CheckpointCoordinator
}

func (r responder) Acknowledge(k state.TaskKey, id barrier.CheckpointID, snap state.TaskSnapshot, m task.CheckpointMetrics) {
	r.c.Acknowledge(k, id, snap, coordinator.TaskCheckpointMetrics{AlignmentDuration: m.AlignmentDuration,
		StartDelay: m.StartDelay, SyncDuration: m.SyncDuration, AsyncDuration: m.AsyncDuration, StateSize: m.StateSize})
}

func (r responder) Decline(k state.TaskKey, id barrier.CheckpointID, reason error) {
	if errors.Is(reason, task.ErrNotRunning) {
		// The task finished: the job is ending and checkpointing is
		// detached as soon as the first task finishes, which aborts this
		// checkpoint without counting it as a failure.
		return
	}
	r.c.Decline(k, id, reason)
}

// TriggerCheckpoint etc. implement coordinator.TaskGateway.
func (ck *checkpointing) task(k state.TaskKey) *task.Task {
	ck.mu.Lock()
	defer ck.mu.Unlock()
	return ck.tasks[k]
}

func (ck *checkpointing) TriggerCheckpoint(k state.TaskKey, b barrier.Barrier) error {
	t := ck.task(k)
	if t == nil {
		return fmt.Errorf("weir: no task %v", k)
	}
	t.TriggerCheckpoint(b)
	return nil
}

func (ck *checkpointing) NotifyCheckpointComplete(k state.TaskKey, id barrier.CheckpointID) {
	if t := ck.task(k); t != nil {
		t.NotifyCheckpointComplete(id)
	}
}

func (ck *checkpointing) NotifyCheckpointAborted(k state.TaskKey, id barrier.CheckpointID) {
	if t := ck.task(k); t != nil {
		t.NotifyCheckpointAborted(id)
	}
}

// restoreConfig extracts what one vertex needs from a checkpoint.
func restoreConfig(m *state.Metadata, vertex string, r state.StateReader) *task.RestoreConfig {
	rc := &task.RestoreConfig{ID: m.ID, Operators: map[string][]state.OperatorSubtaskState{}, Reader: r}
	for k, snap := range m.Tasks {
		if k.Vertex != vertex {
			continue
		}
		for op, s := range snap.Operators {
			rc.Operators[op] = append(rc.Operators[op], s)
		}
	}
	return rc
}

// runWithCheckpointing runs the job attempt by attempt: each failure
// restarts every task from the latest completed checkpoint, as long as the
// restart strategy allows.
func (e *Environment) runWithCheckpointing(ctx context.Context, g *jobGraph, pool *buffer.GlobalPool, res *Result, pl placement) error {
	cc := e.cfg.ckpt
	storage := cc.Storage
	if storage == nil {
		var err error
		if cc.Dir == "" {
			// A private directory, removed when the job ends: checkpoints
			// do not outlive the process, savepoints (exported elsewhere)
			// do.
			tmp, err := os.MkdirTemp("", "weir-checkpoints-*")
			if err != nil {
				return fmt.Errorf("weir: checkpoint storage: %w", err)
			}
			defer os.RemoveAll(tmp)
			if storage, err = state.NewFileStorage(state.FileStorageConfig{Dir: tmp, Logger: e.cfg.logger}); err != nil {
				return fmt.Errorf("weir: checkpoint storage: %w", err)
			}
		} else if storage, err = state.NewFileStorage(state.FileStorageConfig{Dir: cc.Dir, Logger: e.cfg.logger}); err != nil {
			return fmt.Errorf("weir: checkpoint storage: %w", err)
		}
	}
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
	attemptCancel := func(error) {}
	var acMu sync.Mutex
	coord, err := coordinator.New(cc.coordinatorConfig(), storage,
		coordinator.WithLogger(e.cfg.logger),
		coordinator.OnFailure(func(err error) {
			acMu.Lock()
			defer acMu.Unlock()
			attemptCancel(err)
		}))
	if err != nil {
		return fmt.Errorf("weir: %w", err)
	}
	ck := &checkpointing{coord: coord, storage: storage, mode: cc.Mode}
	var restore *state.Metadata

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
		d, err := e.deploy(g, pool, ck, restore, pl.forAttempt(res.Restarts))
		if err != nil {
			return err
		}
		var sources, all []state.TaskKey
		ck.mu.Lock()
		ck.tasks = map[state.TaskKey]*task.Task{}
		for _, t := range d.tasks {
			ck.tasks[t.Key()] = t
			all = append(all, t.Key())
			if t.IsSource() {
				sources = append(sources, t.Key())
			}
		}
		ck.mu.Unlock()
		if err := coord.Attach(sources, all, ck); err != nil {
			return fmt.Errorf("weir: %w", err)
		}
		actx, acancel := context.WithCancelCause(ctx)
		acMu.Lock()
		attemptCancel = acancel
		acMu.Unlock()
		var once sync.Once
		err = runAttemptHook(actx, d, func() {
			// A bounded job is ending: no further checkpoint can complete.
			once.Do(func() { coord.Detach(errors.New("weir: job finishing")) })
		})
		if cause := context.Cause(actx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause
		}
		acancel(nil)
		coord.Detach(err)
		res.Tasks = collectMetrics(d)
		final := e.final
		if err == nil {
			if final != nil {
				if cerr := final.resolve(true); cerr != nil {
					return fmt.Errorf("weir: final commit: %w", cerr)
				}
			}
			_ = coord.Shutdown(coordinator.JobFinished)
			return nil
		}
		if final != nil {
			_ = final.resolve(false)
		}
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
			return err
		}
		res.Restarts++
		if m, ok := coord.LatestCompleted(); ok {
			restore = &m
		}
	}
}
