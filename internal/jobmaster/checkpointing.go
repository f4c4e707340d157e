package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/google/uuid"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/deploy"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/s3"
	"github.com/weirstream/weir/task"
)

// checkpointing is one job's checkpoint machinery shared by its attempts.
type checkpointing struct {
	coord   *coordinator.CheckpointCoordinator
	storage state.Storage
	mode    barrier.Mode
	// alignment and alignTimeout: how exactly-once checkpoints align at
	// the tasks' inputs.
	alignment    barrier.Alignment
	alignTimeout time.Duration
	from         *deploy.RestorePoint // the job's starting point (CheckpointSpec.RestoreFrom), or nil
	// guard, with high availability, makes the coordinator's storage
	// writes conditional on its leadership (nil: none).
	guard *leaderGuard

	mu struct {
		sync.Mutex
		cancelAttempt context.CancelCauseFunc // of the running attempt
	}
}

func (ck *checkpointing) taskConfig() *task.CheckpointConfig {
	return &task.CheckpointConfig{Mode: ck.mode, Alignment: ck.alignment, AlignmentTimeout: ck.alignTimeout,
		Storage: ck.storage, Responder: responder{ck.coord}}
}

// responder adapts the coordinator to task.CheckpointResponder.
type responder struct {
	c *coordinator.CheckpointCoordinator
}

func (r responder) Acknowledge(k state.TaskKey, id barrier.CheckpointID, snap state.TaskSnapshot, m task.CheckpointMetrics) {
	r.c.Acknowledge(k, id, snap, checkpointMetrics(m))
}

func (r responder) Running(k state.TaskKey) { r.c.TaskRunning(k) }

func (r responder) Finishing(k state.TaskKey) { r.c.TaskFinishing(k) }

func (r responder) Finished(k state.TaskKey) { r.c.TaskFinished(k) }

func (r responder) Decline(k state.TaskKey, id barrier.CheckpointID, reason error) {
	r.c.Decline(k, id, reason)
}

// checkpointMetrics converts a task's checkpoint metrics for the
// coordinator.
func checkpointMetrics(m task.CheckpointMetrics) coordinator.TaskCheckpointMetrics {
	return coordinator.TaskCheckpointMetrics{AlignmentDuration: m.AlignmentDuration,
		StartDelay: m.StartDelay, SyncDuration: m.SyncDuration, AsyncDuration: m.AsyncDuration, StateSize: m.StateSize}
}

// locker is implemented by storages that can keep a second running job
// off their place (state.FileStorage: an flock).
type locker interface {
	Lock() (io.Closer, error)
}

// newCheckpointing sets up the job's checkpoint storage and coordinator and
// opens the restore point, if the job starts from one. cleanup releases
// the storage's lock and removes what only this run needed (a private
// checkpoint directory). haJob, for a highly available job, is its ID in
// etcd: the coordinator writes to its storage through a leaderGuard, and
// without a job ID of its own the job's checkpoints go to the place of
// that ID, which every coordinator of the job shares.
func newCheckpointing(cc *CheckpointSpec, g *graph.JobGraph, log *zap.Logger, haJob string) (_ *checkpointing, _ func(), err error) {
	guarded := haJob != ""
	var cleanups []func()
	cleanup := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
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
			dir = tmp
			cleanups = append(cleanups, func() { os.RemoveAll(tmp) })
		}
		jobID := cc.JobID
		if jobID == "" {
			jobID = haJob
		}
		if jobID == "" && cc.RestoreFrom != "" && cc.Dir != "" {
			if s3.IsURL(cc.Dir) {
				jobID = restoredObjectJobID(cc.RestoreFrom, cc.Dir, log)
			} else {
				jobID = restoredJobID(cc.RestoreFrom, cc.Dir)
			}
		}
		if jobID == "" {
			jobID = uuid.NewString()
		}
		if storage, err = openStorage(dir, jobID, log); err != nil {
			return nil, nil, fmt.Errorf("weir: checkpoint storage: %w", err)
		}
		opened := storage
		cleanups = append(cleanups, func() { closeStorage(opened, log) })
		log.Info("checkpoint storage", zap.String("dir", dir), zap.String("job", jobID))
	}
	// A highly available job's coordinators share its place by design:
	// only the leader writes to it, fenced by etcd (leaderGuard), and a
	// standby holding a lock would keep the next leader out.
	if l, ok := storage.(locker); ok && !guarded {
		lock, err := l.Lock()
		if err != nil {
			return nil, nil, fmt.Errorf("weir: checkpoint storage: %w", err)
		}
		cleanups = append(cleanups, func() {
			if err := lock.Close(); err != nil {
				log.Warn("releasing the checkpoint storage's lock", zap.Error(err))
			}
		})
	}
	ck := &checkpointing{storage: storage, mode: cc.Coordinator.Mode}
	if cc.Coordinator.Unaligned {
		ck.alignment = barrier.Unaligned
		if cc.Coordinator.AlignedTimeout > 0 {
			ck.alignment, ck.alignTimeout = barrier.AlignedWithTimeout, cc.Coordinator.AlignedTimeout
		}
	}
	var claim bool
	if cc.RestoreFrom != "" {
		var rp *deploy.RestorePoint
		var c bool
		if s3.IsURL(cc.RestoreFrom) {
			var done func()
			if rp, c, done, err = openObjectRestorePoint(cc.RestoreFrom, storage, log); err != nil {
				return nil, nil, fmt.Errorf("weir: restore from %s: %w", cc.RestoreFrom, err)
			}
			cleanups = append(cleanups, done)
		} else if rp, c, err = openRestorePoint(cc.RestoreFrom, storage, log); err != nil {
			return nil, nil, err
		}
		ck.from, claim = rp, c
		log.Info("restoring", zap.String("from", cc.RestoreFrom),
			zap.Uint64("checkpoint", uint64(rp.Meta.ID)), zap.Stringer("kind", rp.Meta.Kind), zap.String("job", rp.Meta.JobID))
		if g != nil {
			err := rp.CheckKinds(g)
			if err == nil {
				err = checkNonRestored(rp, g, cc.AllowNonRestoredState, log)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("weir: restore from %s: %w", cc.RestoreFrom, err)
			}
		}
	}
	opts := []coordinator.Option{
		coordinator.WithLogger(log),
		coordinator.OnFailure(func(err error) { ck.failAttempt(err) }),
	}
	// Continue after checkpoints an earlier run left in the storage
	// instead of overwriting them.
	ids, err := storage.Checkpoints()
	if err != nil {
		return nil, nil, fmt.Errorf("weir: checkpoint storage: listing earlier checkpoints: %w", err)
	}
	if len(ids) > 0 {
		opts = append(opts, coordinator.WithFirstCheckpointID(ids[0]+1))
	}
	var cstore coordinator.Storage = storage
	cfg := cc.Coordinator
	if guarded {
		// A canceled coordinator leaves the job to the next leader.
		cfg.RetainOnCancel = true
		ck.guard = &leaderGuard{}
		cstore = guardedStorage{Storage: storage, g: ck.guard, log: log}
	}
	if ck.coord, err = coordinator.New(cfg, cstore, opts...); err != nil {
		return nil, nil, fmt.Errorf("weir: %w", err)
	}
	if ck.from != nil {
		if err := ck.coord.Restore(ck.from.Meta, claim); err != nil {
			return nil, nil, fmt.Errorf("weir: %w", err)
		}
	}
	return ck, cleanup, nil
}

// restoredJobID returns the job ID of the place under the checkpoint root
// root that restore names or lies in (the place itself, one of its chk-N,
// or root when it holds exactly one job's checkpoints), or "" if there is
// none: a job restarted from its own checkpoints keeps its job ID, and so
// its place, without being told.
func restoredJobID(restore, root string) string {
	r, err1 := filepath.Abs(restore)
	d, err2 := filepath.Abs(root)
	if err1 != nil || err2 != nil {
		return ""
	}
	if _, ok := strings.CutPrefix(filepath.Base(r), "chk-"); ok {
		r = filepath.Dir(r)
	}
	if r == d {
		places, err := state.FindPlaces(state.OSFS{}, d)
		if err != nil || len(places) != 1 {
			return ""
		}
		return places[0].JobID
	}
	if filepath.Dir(r) == d && state.ValidJobID(filepath.Base(r)) == nil {
		return filepath.Base(r)
	}
	return ""
}

// restoredObjectJobID is restoredJobID for a checkpoint root on object
// storage: the job ID of the place under root that restore names or lies
// in (or root's one place, if restore is root), or "".
func restoredObjectJobID(restore, root string, log *zap.Logger) string {
	restore, root = strings.TrimSuffix(restore, "/"), strings.TrimSuffix(root, "/")
	if restore == root {
		st, err := openStorage(root, "", log)
		if err != nil {
			return ""
		}
		defer closeStorage(st, log)
		pl, ok := st.(placeLister)
		if !ok {
			return ""
		}
		places, err := pl.Places()
		if err != nil || len(places) != 1 {
			return ""
		}
		return places[0].JobID
	}
	rest, ok := strings.CutPrefix(restore, root+"/")
	if !ok {
		return ""
	}
	job, _, _ := strings.Cut(rest, "/")
	if state.ValidJobID(job) != nil {
		return ""
	}
	return job
}

// openRestorePoint opens path, which is a savepoint directory, a
// checkpoint directory (chk-N), a job's checkpoint place (its newest
// checkpoint whose files all verify) or a checkpoint root holding one
// job's place (that place's; several jobs' places are an error listing
// them). claim reports a checkpoint of own, the job's own storage: it is
// subject to retention; anything else is only read.
func openRestorePoint(path string, own state.Storage, log *zap.Logger) (rp *deploy.RestorePoint, claim bool, err error) {
	fail := func(err error) (*deploy.RestorePoint, bool, error) {
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
	if loc, ok := locationOf(own); ok {
		ownDir, _ = filepath.Abs(filepath.Join(loc.Root, loc.JobID))
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
		if m.JobID != "" && m.JobID != filepath.Base(parent) {
			return fail(&state.CorruptError{Path: filepath.Join(base, state.MetadataFile),
				Reason: fmt.Sprintf("it is the metadata of job %q, in the place of job %q", m.JobID, filepath.Base(parent))})
		}
		if err := fs.Verify(m); err != nil {
			return fail(err)
		}
		if parent == ownDir {
			return &deploy.RestorePoint{Meta: m, Reader: own}, true, nil
		}
		return &deploy.RestorePoint{Meta: m, Reader: fs}, false, nil
	}
	if _, err := os.Stat(filepath.Join(abs, state.MetadataFile)); err == nil {
		m, sp, err := state.OpenSavepoint(abs, log)
		if err != nil {
			return fail(err)
		}
		return &deploy.RestorePoint{Meta: m, Reader: sp}, false, nil
	}
	// A job's place or a checkpoint root: the newest good checkpoint.
	if abs == ownDir {
		m, err := own.Latest()
		if err != nil {
			return fail(err)
		}
		return &deploy.RestorePoint{Meta: m, Reader: own}, true, nil
	}
	places, err := state.FindPlaces(state.OSFS{}, abs)
	if err != nil {
		return fail(err)
	}
	if ownDir != "" && abs == filepath.Dir(ownDir) && slices.ContainsFunc(places, func(p state.Place) bool {
		return p.JobID == filepath.Base(ownDir)
	}) {
		// The job's own checkpoint root: its own place's newest.
		m, err := own.Latest()
		if err != nil {
			return fail(err)
		}
		return &deploy.RestorePoint{Meta: m, Reader: own}, true, nil
	}
	cfg := state.FileStorageConfig{Dir: abs, Logger: log}
	switch {
	case len(places) > 1:
		return fail(&state.SeveralJobsError{Dir: abs, Places: places})
	case len(places) == 1 && places[0].JobID != "":
		cfg.JobID = places[0].JobID
	case len(places) == 0:
		return fail(fmt.Errorf("%w: no checkpoints in %s", state.ErrNotFound, abs))
	}
	fs, err := state.NewFileStorage(cfg)
	if err != nil {
		return fail(err)
	}
	m, err := fs.Latest()
	if err != nil {
		return fail(err)
	}
	if fs.Dir() == ownDir {
		return &deploy.RestorePoint{Meta: m, Reader: own}, true, nil
	}
	return &deploy.RestorePoint{Meta: m, Reader: fs}, false, nil
}

// checkNonRestored fails a restore whose restore point holds state of
// operators that g lacks, unless allow: that state is then dropped, and
// logged.
func checkNonRestored(rp *deploy.RestorePoint, g *graph.JobGraph, allow bool, log *zap.Logger) error {
	ops := rp.NonRestored(g)
	if len(ops) == 0 {
		return nil
	}
	if !allow {
		return &deploy.NonRestoredError{Checkpoint: rp.Meta.ID, Operators: ops}
	}
	for _, op := range ops {
		log.Warn("dropping the state of an operator the job does not have (allowed by WithAllowNonRestoredState)",
			zap.Uint64("checkpoint", uint64(rp.Meta.ID)), zap.String("operator", op.Name), zap.String("id", op.ID))
	}
	return nil
}

// failAttempt fails the running attempt (too many failed checkpoints).
func (ck *checkpointing) failAttempt(err error) {
	ck.mu.Lock()
	cancel := ck.mu.cancelAttempt
	ck.mu.Unlock()
	if cancel != nil {
		cancel(err)
	}
}

// restorePointFor returns where a (re)started attempt restores from.
func (ck *checkpointing) restorePointFor() *deploy.RestorePoint {
	m, ok := ck.coord.LatestCompleted()
	if !ok {
		return nil
	}
	if ck.from != nil && m.ID == ck.from.Meta.ID {
		return ck.from
	}
	return &deploy.RestorePoint{Meta: m, Reader: ck.storage}
}
