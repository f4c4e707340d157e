package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/ha"
	"github.com/weirstream/weir/state"
)

// ErrLeadershipLost is returned by a coordinator of a highly available job
// whose term as leader ended before the job did (its etcd lease ended,
// etcd could not confirm a write, or another coordinator took over): the
// job goes on under the next leader. Run the coordinator again to stand
// for election again.
var ErrLeadershipLost = ha.ErrLeadershipLost

// maxOrphans bounds the checkpoint IDs a new leader discards between the
// pointer and the counter (IDs an earlier leader triggered but did not
// complete).
const maxOrphans = 1024

// leaderGuard makes the coordinator's storage writes conditional on the
// current term: a completed checkpoint becomes the job's restore point
// only once etcd recorded it under this leader's election key, and only
// then does the coordinator tell the tasks (and so the two-phase-commit
// sinks) that it completed.
type leaderGuard struct {
	lead atomic.Pointer[ha.Leadership]
	mu   struct {
		sync.Mutex
		pointer barrier.CheckpointID // the pointer in etcd
		// held: discards of the pointer's checkpoint (at the job's end),
		// carried out once etcd recorded the end.
		held []barrier.CheckpointID
	}
}

func (g *leaderGuard) start(l *ha.Leadership, pointer barrier.CheckpointID) {
	g.mu.Lock()
	g.mu.pointer = pointer
	g.mu.Unlock()
	g.lead.Store(l)
}

func (g *leaderGuard) leadership() (*ha.Leadership, error) {
	l := g.lead.Load()
	if l == nil {
		return nil, fmt.Errorf("%w: not elected", ha.ErrLeadershipLost)
	}
	return l, l.Err()
}

// guardedStorage is the coordinator's storage of a highly available job.
type guardedStorage struct {
	state.Storage
	g   *leaderGuard
	log *zap.Logger
}

func (s guardedStorage) WriteMetadata(m state.Metadata) error {
	l, err := s.g.leadership()
	if err != nil {
		return err
	}
	if err := s.Storage.WriteMetadata(m); err != nil {
		return err
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	if err := l.Complete(context.Background(), m.ID, s.g.mu.pointer); err != nil {
		return fmt.Errorf("weir: ha: checkpoint %d is written but etcd did not record it: %w", m.ID, err)
	}
	s.g.mu.pointer = m.ID
	return nil
}

func (s guardedStorage) ExportSavepoint(m state.Metadata, dir string) (string, error) {
	l, err := s.g.leadership()
	if err != nil {
		return "", err
	}
	path, err := s.Storage.ExportSavepoint(m, dir)
	if err != nil {
		return "", err
	}
	// A terminal savepoint commits the sinks' transactions: only while
	// this term lasts.
	if err := l.Check(context.Background()); err != nil {
		return "", err
	}
	return path, nil
}

func (s guardedStorage) Discard(id barrier.CheckpointID) error {
	s.g.mu.Lock()
	if id == s.g.mu.pointer {
		// A new leader would restore from it: it goes only once the
		// job's end is recorded.
		s.g.mu.held = append(s.g.mu.held, id)
		s.g.mu.Unlock()
		return nil
	}
	s.g.mu.Unlock()
	if _, err := s.g.leadership(); err != nil {
		// The next leader owns the storage now (and discards what this
		// one left); etcd may even have recorded id before this leader
		// saw its write fail.
		s.log.Info("not discarding checkpoint: no longer the leader", zap.Uint64("checkpoint", uint64(id)))
		return nil
	}
	return s.Storage.Discard(id)
}

// coordinatorID names this process in the election.
func coordinatorID(h *HASpec) string {
	if h.ID != "" {
		return h.ID
	}
	host, _ := os.Hostname()
	return host + "-" + strconv.Itoa(os.Getpid())
}

// takeOver reads the job's record as its new leader: it continues the
// checkpoint IDs after the counter and restores from the pointer. ended
// reports a job that already ended (err is then its failure, if any).
func (j *clusterJob) takeOver(ctx context.Context, lead *ha.Leadership) (ended bool, err error) {
	rec, err := j.ha.Read(ctx)
	if err != nil {
		return false, fmt.Errorf("weir: %w", err)
	}
	if s := rec.Status; s != nil {
		if s.Finished {
			j.log.Info("the job already finished", zap.String("job", j.ha.JobID()))
			return true, nil
		}
		return true, fmt.Errorf("weir: ha: job %s already failed: %s", j.ha.JobID(), s.Error)
	}
	ck := j.ck
	ck.coord.ContinueAfter(rec.Counter)
	var pointer barrier.CheckpointID
	var drop []barrier.CheckpointID
	if p := rec.Pointer; p != nil {
		m, err := j.openPointer(p, j.ha.PointerKey())
		if err != nil {
			return false, err
		}
		keep, d := j.earlierCheckpoints(m.ID, p.Prev)
		drop = d
		// The retained checkpoints before the pointer's, oldest first:
		// the coordinator's retention discards them as new ones complete.
		for _, k := range keep {
			if err := ck.coord.Restore(k, true); err != nil {
				return false, fmt.Errorf("weir: %w", err)
			}
		}
		if err := ck.coord.Restore(m, true); err != nil {
			return false, fmt.Errorf("weir: %w", err)
		}
		ck.from, pointer = nil, m.ID
		j.log.Info("taking over from checkpoint", zap.Uint64("checkpoint", uint64(m.ID)),
			zap.Uint64("epoch", lead.Epoch()), zap.Uint64("previous_epoch", p.Epoch), zap.Int("retained_before", len(keep)))
	}
	// Checkpoints an earlier leader triggered but did not complete: their
	// IDs are never used again.
	for id := pointer + 1; id <= rec.Counter && id <= pointer+maxOrphans; id++ {
		if rec.Pointer != nil && id == rec.Pointer.ID {
			continue // skipped by openPointer; kept for inspection
		}
		if err := ck.storage.Discard(id); err != nil {
			j.log.Warn("discarding an earlier leader's incomplete checkpoint", zap.Uint64("checkpoint", uint64(id)), zap.Error(err))
		}
	}
	j.guard.start(lead, pointer)
	for _, id := range drop {
		j.log.Info("discarding a checkpoint an earlier leader left", zap.Uint64("checkpoint", uint64(id)), zap.Uint64("pointer", uint64(pointer)))
		if err := j.ck.storage.Discard(id); err != nil {
			j.log.Warn("discarding a checkpoint an earlier leader left", zap.Uint64("checkpoint", uint64(id)), zap.Error(err))
		}
	}
	return false, nil
}

// earlierCheckpoints sorts the checkpoints older than the one restored,
// which an earlier leader left in the storage and no later leader knows
// (etcd names only the pointer's), into those to keep and those to drop.
// It keeps the newest Retained-1 whose metadata reads (completed: the
// metadata is written last), oldest first, so that the job keeps as many
// checkpoints as its configuration says across a failover; it drops the
// rest: a checkpoint whose discard a killed leader began (retention
// removes the metadata first, then the files) and did not finish, and
// those retention would have discarded. One exception: prev, the
// checkpoint before the pointer, is openPointer's fallback while this
// term lasts; if it is not kept, it is held and discarded at the job's
// end, with the pointer's. Without the drops their objects would stay in
// the storage after the job. It costs one listing of the job's
// checkpoints (delimited: one entry per checkpoint) and a metadata read
// per kept one.
func (j *clusterJob) earlierCheckpoints(restored, prev barrier.CheckpointID) (keep []state.Metadata, drop []barrier.CheckpointID) {
	ids, err := j.ck.storage.Checkpoints()
	if err != nil {
		j.log.Warn("listing the checkpoints an earlier leader left", zap.Error(err))
		return nil, nil
	}
	slices.Sort(ids)
	want := 0
	if cs := j.spec.Checkpoint; cs != nil {
		want = cs.Coordinator.Retained - 1 // the restored one is the last
	}
	for i := len(ids) - 1; i >= 0; i-- {
		id := ids[i]
		if id >= restored {
			continue
		}
		if len(keep) < want || id == prev {
			if m, err := j.ck.storage.ReadMetadata(id); err == nil {
				switch {
				case len(keep) < want:
					keep = append(keep, m)
				default: // prev, beyond the retained ones
					j.guard.mu.Lock()
					j.guard.mu.held = append(j.guard.mu.held, id)
					j.guard.mu.Unlock()
				}
				continue
			}
		}
		drop = append(drop, id)
	}
	slices.Reverse(keep)
	return keep, drop
}

// openPointer reads and verifies the checkpoint the pointer names. If it
// is missing or corrupt, it falls back to the pointer before only when no
// two-phase-commit sink can have committed from it: a job with such
// sinks may have committed the newer checkpoint's transactions, and
// replaying from an older one would commit values twice.
func (j *clusterJob) openPointer(p *ha.Pointer, key string) (state.Metadata, error) {
	m, err := j.readVerified(p.ID)
	if err == nil {
		return m, nil
	}
	err = fmt.Errorf("weir: ha: checkpoint %d, which etcd's %s points to, in %s: %w", p.ID, key, j.storage, err)
	if j.spec.Final != nil {
		return state.Metadata{}, fmt.Errorf("%w; not falling back to an older checkpoint: two-phase-commit sinks may have committed its transactions", err)
	}
	if p.Prev == 0 {
		return state.Metadata{}, fmt.Errorf("%w; no older checkpoint to fall back to", err)
	}
	prev, perr := j.readVerified(p.Prev)
	if perr != nil {
		return state.Metadata{}, fmt.Errorf("%w; the checkpoint before it, %d, does not verify either: %w", err, p.Prev, perr)
	}
	j.log.Warn("skipping the latest checkpoint: its metadata or state does not verify; the job has no two-phase-commit sinks, so nothing can have been committed from it",
		zap.Uint64("skipped", uint64(p.ID)), zap.Uint64("restoring", uint64(p.Prev)), zap.Error(err))
	return prev, nil
}

// stateVerifier is checkpoint storage that can check a state file's
// checksum without restoring it.
type stateVerifier interface {
	VerifyState(h state.StreamHandle) error
}

func (j *clusterJob) readVerified(id barrier.CheckpointID) (state.Metadata, error) {
	m, err := j.ck.storage.ReadMetadata(id)
	if err != nil {
		return state.Metadata{}, err
	}
	if v, ok := j.ck.storage.(stateVerifier); ok {
		for _, h := range m.StreamHandles() {
			if err := v.VerifyState(h); err != nil {
				return state.Metadata{}, err
			}
		}
	}
	return m, nil
}

// beforeEnd is SetBeforeEndHook's hook.
var beforeEnd atomic.Pointer[func(job string, s ha.Status)]

// SetBeforeEndHook makes fn run where the leader of a highly available
// job has seen it end (s: how) and not yet recorded it in etcd, and
// returns what restores the hook before. Tests cut the leader off from
// etcd there: a new leader then finds a job that ended and is not
// recorded as ended, and takes it over from its last checkpoint.
func SetBeforeEndHook(fn func(job string, s ha.Status)) (restore func()) {
	var p *func(string, ha.Status)
	if fn != nil {
		p = &fn
	}
	old := beforeEnd.Swap(p)
	return func() { beforeEnd.Store(old) }
}

// endTerm records how the job ended, unless the term ended first or this
// process was canceled (then the next leader goes on with the job). It
// returns what runCluster returns.
func (j *clusterJob) endTerm(parent context.Context, lead *ha.Leadership, err error) error {
	if lerr := lead.Err(); lerr != nil {
		return fmt.Errorf("weir: %w", lerr)
	}
	if parent.Err() != nil {
		return err // the next leader takes over at once (Resign)
	}
	s := ha.Status{Finished: err == nil}
	if err != nil {
		s.Error = err.Error()
	}
	if h := beforeEnd.Load(); h != nil {
		(*h)(j.ha.JobID(), s)
	}
	if eerr := lead.End(context.Background(), s); eerr != nil {
		if err == nil {
			return fmt.Errorf("weir: ha: the job finished but etcd did not record it (the next leader finishes it again): %w", eerr)
		}
		return errors.Join(err, eerr)
	}
	j.guard.mu.Lock()
	held := j.guard.mu.held
	j.guard.mu.held = nil
	j.guard.mu.Unlock()
	for _, id := range held {
		if derr := j.ck.storage.Discard(id); derr != nil {
			j.log.Warn("discarding checkpoint", zap.Uint64("checkpoint", uint64(id)), zap.Error(derr))
		}
	}
	return err
}
