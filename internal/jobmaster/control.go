package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/dashboard"
	"github.com/weirstream/weir/internal/metrics"
)

// ErrNoCheckpointing is returned by the savepoint and checkpoint actions
// of a job without checkpointing.
var ErrNoCheckpointing = errors.New("weir: checkpointing is not enabled for this job")

// control is the job as the dashboard's REST API sees it
// (dashboard.Control).
type control struct {
	j       *Job
	options map[string]string

	mu sync.Mutex
	rt metrics.RuntimeReader // this process's, for a job in it
}

// Workers lists the processes that run the job's tasks: a cluster job's
// workers, or this process.
func (c *control) Workers() []metrics.Worker {
	if ws, ok := c.j.status.workers(); ok {
		return ws
	}
	tasks := 0
	for _, v := range c.j.sampler.Latest().Vertices {
		tasks += v.Parallelism
	}
	c.mu.Lock()
	rt := c.rt.Read()
	c.mu.Unlock()
	return []metrics.Worker{{ID: "local", Tasks: tasks, Runtime: rt, Reported: time.Now()}}
}

// ProfileWorker records a CPU profile of one of Workers: over the control
// connection for a cluster job's worker, of this process ("local") for a
// job in it.
func (c *control) ProfileWorker(ctx context.Context, id string, d time.Duration) ([]byte, error) {
	if profile, ok := c.j.status.profiler(); ok {
		return profile(ctx, id, d)
	}
	if id != "local" {
		return nil, fmt.Errorf("%w %q: the job runs in this process (\"local\")", dashboard.ErrNoWorker, id)
	}
	return dashboard.CPUProfile(ctx, d)
}

var _ dashboard.Control = (*control)(nil)

func (c *control) JobID() string                           { return c.j.id }
func (c *control) Status() metrics.Status                  { return c.j.status.liveStatus() }
func (c *control) Options() map[string]string              { return maps.Clone(c.options) }
func (c *control) Failures() []metrics.Failure             { return c.j.status.failures() }
func (c *control) Cancel()                                 { c.j.Cancel() }
func (c *control) SavepointDir(dir string) (string, error) { return c.j.SavepointDir(dir) }

func (c *control) Checkpoints() (coordinator.Stats, bool) {
	if c.j.ck == nil {
		return coordinator.Stats{}, false
	}
	return c.j.ck.coord.Stats(), true
}

func (c *control) TriggerSavepoint(ctx context.Context, dir string) (string, error) {
	if c.j.ck == nil {
		return "", ErrNoCheckpointing
	}
	return c.j.ck.coord.TriggerSavepoint(ctx, dir)
}

func (c *control) StopWithSavepoint(ctx context.Context, dir string) (string, error) {
	return c.j.StopWithSavepoint(ctx, dir)
}

func (c *control) TriggerCheckpoint(ctx context.Context) (uint64, error) {
	if c.j.ck == nil {
		return 0, ErrNoCheckpointing
	}
	m, err := c.j.ck.coord.TriggerCheckpoint(ctx)
	return uint64(m.ID), err
}

// ID identifies the job in the REST API: 32 hex digits.
func (j *Job) ID() string { return j.id }

// SavepointDir resolves the target directory of a savepoint: dir made
// absolute (a URL, as s3://bucket/prefix, stays as it is), or the configured default (CheckpointSpec.SavepointDir) when
// dir is empty. Without checkpointing the error is ErrNoCheckpointing
// (wrapping dashboard.ErrConflict).
func (j *Job) SavepointDir(dir string) (string, error) {
	if j.ck == nil {
		return "", fmt.Errorf("%w (%w)", ErrNoCheckpointing, dashboard.ErrConflict)
	}
	if dir == "" {
		dir = j.savepointDir
	}
	if dir == "" {
		return "", errors.New("weir: savepoint needs a target directory (none given, and no CheckpointConfig.SavepointDir)")
	}
	if strings.Contains(dir, "://") {
		return dir, nil // a URL, as s3://bucket/prefix, stays as it is
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("weir: savepoint: %w", err)
	}
	return abs, nil
}

// StopWithSavepoint takes a savepoint into dir (see SavepointDir) and
// stops the job at it: Wait then returns a nil error. While it is in
// progress the job's REST status is "stopping"; if the savepoint fails
// the job goes on.
func (j *Job) StopWithSavepoint(ctx context.Context, dir string) (string, error) {
	if j.ck == nil {
		return "", ErrNoCheckpointing
	}
	j.status.setStopping(true)
	p, err := j.ck.coord.StopWithSavepoint(ctx, dir)
	if err != nil {
		j.status.setStopping(false)
		return "", err
	}
	j.Stop()
	return p, nil
}
