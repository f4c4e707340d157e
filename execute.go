package weir

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/deploy"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/jobmaster"
	"github.com/weirstream/weir/task"
)

// Result is what a finished job reports.
type Result struct {
	// Tasks holds every task's metrics of the last attempt.
	Tasks []task.Metrics
	// Duration is the wall time of Execute.
	Duration time.Duration
	// Restarts is the number of times the job restarted after a failure.
	Restarts int
	// Checkpoints are the statistics of the job's checkpoints (nil when
	// checkpointing is off).
	Checkpoints *CheckpointStats
	// LeakedSegments is the number of network segments not returned to the
	// pool at the end: always 0 unless the runtime has a bug.
	LeakedSegments int
}

// RecordsIn sums the records every task read from its input gate.
func (r *Result) RecordsIn() int64 {
	var n int64
	for _, t := range r.Tasks {
		n += t.RecordsIn
	}
	return n
}

// Execute runs the job until its sources are exhausted and every record has
// been processed, the job fails (after its restart strategy gave up), or
// ctx is canceled. Invalid configuration is reported here.
func (e *Environment) Execute(ctx context.Context) (*Result, error) {
	j, err := e.Start(ctx)
	if err != nil {
		return nil, err
	}
	return j.Wait()
}

// Start validates the job and starts running it in the background.
func (e *Environment) Start(ctx context.Context) (*Job, error) {
	spec, err := e.spec()
	if err != nil {
		return nil, err
	}
	for _, check := range e.runChecks {
		if err := check(ctx); err != nil {
			return nil, err
		}
	}
	m, err := jobmaster.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &Job{m: m}, nil
}

// spec validates the job and describes it for the runtime.
func (e *Environment) spec() (jobmaster.Spec, error) {
	c := &e.cfg
	if err := c.validate(); err != nil {
		return jobmaster.Spec{}, err
	}
	for _, check := range e.checks {
		if err := check(); err != nil {
			return jobmaster.Spec{}, err
		}
	}
	g, err := graph.Build(e.nodes, graph.Config{Parallelism: c.parallelism, MaxParallelism: c.maxParallelism, Chaining: c.chaining})
	if err != nil {
		return jobmaster.Spec{}, err
	}
	if c.ckpt != nil {
		warnGeneratedIDs(g.Nodes, c.logger)
	}
	spec := jobmaster.Spec{
		Graph: g,
		Deploy: deploy.Config{
			Exclusive:      c.exclusive,
			Floating:       c.floating,
			BufferTimeout:  c.bufferTimeout,
			FlushAlways:    c.bufferTimeoutSet && c.bufferTimeout == 0,
			MaxRecordSize:  c.maxRecordSize,
			Debloat:        c.debloatConfig(),
			ForceUnaligned: c.ckpt != nil && c.ckpt.ForceUnaligned,
		},
		Network: buffer.Config{SegmentSize: c.segmentSize, NumSegments: c.numSegments},
		TCP:     c.tcp,
		Restart: c.restart,
		Final:   e.final,
		Metrics: c.metrics.spec(c.logger),
		Options: c.options(),
		Logger:  c.logger,
	}
	if c.harness != nil {
		spec.Deploy.Harness = harnessAdapter{c.harness}
	}
	spec.Deploy.NewKeyedBackend = c.backend().factory(c.logger)
	if ck := c.ckpt; ck != nil {
		spec.Checkpoint = &jobmaster.CheckpointSpec{Coordinator: ck.coordinatorConfig(), Storage: ck.Storage, Dir: ck.Dir,
			RestoreFrom: c.restoreFrom, AllowNonRestoredState: c.allowNonRestored, JobID: c.jobID, SavepointDir: ck.SavepointDir}
	}
	if cl := c.cluster; cl != nil {
		spec.Cluster = cl.spec()
	}
	return spec, nil
}

// warnGeneratedIDs warns, once, of the stateful operators without a UID of
// a job that checkpoints: their state is stored under IDs generated from
// the job's topology, which a changed job may not find again.
func warnGeneratedIDs(nodes []*graph.Node, log *zap.Logger) {
	var ops []string
	for _, n := range nodes {
		if n.Stateful && n.GeneratedUID {
			ops = append(ops, fmt.Sprintf("%s (generated ID %s)", n.Name, n.UID))
		}
	}
	if len(ops) > 0 && log != nil {
		log.Warn("stateful operators without a UID: their state is stored under IDs generated from the job's topology, "+
			"which change when operators are added or removed on their paths; set a UID on each (Stream.UID, Sink.UID) "+
			"so that savepoints restore into a changed job", zap.Strings("operators", ops))
	}
}

// Job is a running job.
type Job struct {
	m *jobmaster.Job
}

// ErrNoCheckpointing is returned by the Job's checkpoint methods when the
// job runs without WithCheckpointing.
var ErrNoCheckpointing = errors.New("weir: checkpointing is not enabled for this job")

// TriggerSavepoint takes a savepoint of the running job: a snapshot of
// every operator's state, with the guarantee of the job's checkpointing
// mode, exported into a new directory under dir (with dir empty, under
// CheckpointConfig.SavepointDir), whose path it returns. Start a job from it with WithRestoreFrom. A savepoint is not a restore
// point for failover and commits no side effects: transactional sinks
// commit its transactions with the next checkpoint, or when a job starts
// from it. To stop a job at a savepoint, use StopWithSavepoint.
//
// It blocks until the savepoint completed or failed (a
// *coordinator.CheckpointError) or ctx ends. It fails while the job is
// restarting or finishing.
func (j *Job) TriggerSavepoint(ctx context.Context, dir string) (string, error) {
	abs, err := j.savepointDir(dir)
	if err != nil {
		return "", err
	}
	p, err := j.m.Coordinator().TriggerSavepoint(ctx, abs)
	return p, wrapTriggerErr("savepoint", err)
}

// savepointDir checks that the job checkpoints and makes dir absolute;
// an empty dir is CheckpointConfig.SavepointDir.
func (j *Job) savepointDir(dir string) (string, error) {
	if j.m.Coordinator() == nil {
		return "", ErrNoCheckpointing
	}
	return j.m.SavepointDir(dir)
}

// StopWithSavepoint takes a savepoint and stops the job at it, for an
// upgrade or a rescale: from the trigger on no checkpoint starts, the
// savepoint commits the transactional sinks' data up to it, and the job is
// then canceled, so a job started from the savepoint (WithRestoreFrom)
// continues exactly where this one stopped: nothing lost, nothing written
// twice. Wait then returns a nil error. If the savepoint fails, the job
// goes on and the error is returned.
func (j *Job) StopWithSavepoint(ctx context.Context, dir string) (string, error) {
	abs, err := j.savepointDir(dir)
	if err != nil {
		return "", err
	}
	p, err := j.m.StopWithSavepoint(ctx, abs)
	if err != nil {
		return "", wrapTriggerErr("stop with savepoint", err)
	}
	return p, nil
}

// TriggerCheckpoint takes a checkpoint now (or as soon as fewer than
// MaxConcurrent are in progress) and returns its ID once it completed.
// Errors as for TriggerSavepoint.
func (j *Job) TriggerCheckpoint(ctx context.Context) (barrier.CheckpointID, error) {
	c := j.m.Coordinator()
	if c == nil {
		return 0, ErrNoCheckpointing
	}
	m, err := c.TriggerCheckpoint(ctx)
	return m.ID, wrapTriggerErr("checkpoint", err)
}

func wrapTriggerErr(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, coordinator.ErrNotAttached), errors.Is(err, coordinator.ErrClosed):
		return fmt.Errorf("weir: %s: the job is not running (restarting or ended): %w", what, err)
	}
	return fmt.Errorf("weir: %s: %w", what, err)
}

// CheckpointStats returns the job's checkpoint statistics so far (the zero
// Stats without checkpointing).
func (j *Job) CheckpointStats() CheckpointStats {
	c := j.m.Coordinator()
	if c == nil {
		return CheckpointStats{}
	}
	return c.Stats()
}

// Cancel stops the job; Wait then returns context.Canceled.
func (j *Job) Cancel() { j.m.Cancel() }

// Wait blocks until the job ended and returns its result.
func (j *Job) Wait() (*Result, error) {
	r, err := j.m.Wait()
	if r == nil {
		return nil, err
	}
	return &Result{Tasks: r.Tasks, Duration: r.Duration, Restarts: r.Restarts, Checkpoints: r.Checkpoints, LeakedSegments: r.LeakedSegments}, err
}
