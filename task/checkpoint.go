package task

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

// CheckpointResponder receives a task's checkpoint outcome: the
// coordinator, or an RPC client that reaches it. Calls come from the
// task's goroutines and must not block for long.
type CheckpointResponder interface {
	// Running reports that the task is running: its operators are open,
	// their state restored, and it is about to process input. The
	// coordinator triggers checkpoints only once every task is (Flink's
	// NOT_ALL_REQUIRED_TASKS_RUNNING check).
	Running(task state.TaskKey)
	Acknowledge(task state.TaskKey, id barrier.CheckpointID, snap state.TaskSnapshot, m CheckpointMetrics)
	Decline(task state.TaskKey, id barrier.CheckpointID, reason error)
	// Finishing reports that the task's input ended and that it waits for
	// a final checkpoint (FinalCheckpointOperator) before it finishes.
	Finishing(task state.TaskKey)
	// Finished reports that the task finished: its input ended, its
	// operators finished, its outputs ended, and every checkpoint it
	// started was acknowledged or declined.
	Finished(task state.TaskKey)
}

// CheckpointMetrics describe how one task took one checkpoint.
type CheckpointMetrics struct {
	AlignmentDuration time.Duration // first barrier to last barrier
	StartDelay        time.Duration // trigger timestamp to the task starting the checkpoint
	SyncDuration      time.Duration // synchronous part, in the mailbox
	AsyncDuration     time.Duration // asynchronous part
	StateSize         int64
}

// CheckpointConfig turns checkpointing on for a task.
type CheckpointConfig struct {
	Mode barrier.Mode
	// Alignment is how exactly-once checkpoints align at the task's
	// inputs: barrier.Aligned (the default), barrier.Unaligned or
	// barrier.AlignedWithTimeout after AlignmentTimeout. With the last two
	// the task takes savepoints aligned all the same, and takes each
	// checkpoint the way its barrier says.
	Alignment        barrier.Alignment
	AlignmentTimeout time.Duration
	Storage          state.Storage
	Responder        CheckpointResponder
}

// RestoreConfig tells a task to start from a checkpoint.
type RestoreConfig struct {
	ID barrier.CheckpointID
	// Operators maps an operator ID to the states of every subtask of the
	// previous run (all of them: keyed state is picked by key group and
	// operator state redistributed, so parallelism may change).
	Operators map[string][]state.OperatorSubtaskState
	Reader    state.StateReader
	// Channels holds the channel state (unaligned checkpoints) of the
	// vertex's subtasks, by subtask index; PrevParallelism is the vertex's
	// parallelism in the checkpoint. Channel state restores only at the
	// same parallelism.
	Channels        map[int]*state.ChannelStateHandle
	PrevParallelism int
	// Finished lists the subtasks that had finished: deployed finished,
	// they run nothing.
	Finished map[int]bool
}

// opState is one operator's state backends.
type opState struct {
	keyed    state.KeyedBackend
	operator *state.OperatorBackend
	prefix   string
}

// schemas lists the schemas of the operator's states, keyed and operator
// states, sorted by name (a snapshot records them).
func (st *opState) schemas() []state.StateSchema {
	out := st.operator.StateSchemas().Snapshot()
	if h, ok := st.keyed.(state.SchemaHolder); ok {
		out = append(out, h.StateSchemas().Snapshot()...)
	}
	slices.SortFunc(out, func(a, b state.StateSchema) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// restoreSchemas hands the operator's backends the schemas its states
// were snapshotted with: the union over its previous subtasks (a state
// registered lazily may be missing in some).
func (st *opState) restoreSchemas(operator string, prev []state.OperatorSubtaskState) {
	var keyed, oper []state.StateSchema
	seen := map[string]bool{}
	for _, s := range prev {
		for _, sc := range s.Schemas {
			if seen[sc.Kind+"\x00"+sc.Name] {
				continue
			}
			seen[sc.Kind+"\x00"+sc.Name] = true
			if strings.HasPrefix(sc.Kind, "operator list") {
				oper = append(oper, sc)
			} else {
				keyed = append(keyed, sc)
			}
		}
	}
	st.operator.StateSchemas().Restore(operator, oper)
	if h, ok := st.keyed.(state.SchemaHolder); ok {
		h.StateSchemas().Restore(operator, keyed)
	}
}

// checkpointer is a task's checkpoint machinery. It lives in the task's
// goroutine; it implements barrier.Controller.
type checkpointer struct {
	t       *Task
	cfg     *CheckpointConfig
	handler barrier.Handler // nil for source tasks
	blocked []bool
	nblock  int
	alignAt time.Time
	failure error // set by a Controller callback, checked after it returns

	// states are the channel states being recorded, by checkpoint.
	states map[barrier.CheckpointID]*channelState
	// timers are alignment timers and output-side alignment timeouts.
	timers []ckptTimer
}

func newCheckpointer(t *Task, cfg *CheckpointConfig) (*checkpointer, error) {
	if cfg.Storage == nil || cfg.Responder == nil {
		return nil, fmt.Errorf("task %s: checkpointing without storage or responder", t.cfg.Name)
	}
	c := &checkpointer{t: t, cfg: cfg, states: map[barrier.CheckpointID]*channelState{}}
	if g := t.cfg.Gate; g != nil {
		h, err := newHandler(cfg, g.NumChannels(), c)
		if err != nil {
			return nil, fmt.Errorf("task %s: %w", t.cfg.Name, err)
		}
		c.handler = h
		c.blocked = make([]bool, g.NumChannels())
	}
	return c, nil
}

func (c *checkpointer) err() error {
	err := c.failure
	c.failure = nil
	return err
}

// close gives up the channel states still being recorded: the task
// stopped.
func (c *checkpointer) close() {
	for id, s := range c.states {
		s.abort()
		delete(c.states, id)
	}
}

// onBarrier hands barrier b from channel ch to the handler. A channel the
// handler did not block is resumed at once: its producer stopped after
// sending an aligned barrier.
func (c *checkpointer) onBarrier(ch int, b barrier.Barrier) error {
	c.handler.ProcessBarrier(barrier.ChannelIndex(ch), b)
	if !c.blocked[ch] {
		c.t.cfg.Gate.Resume(ch)
	}
	return c.err()
}

// BlockChannel implements barrier.Controller.
func (c *checkpointer) BlockChannel(ch barrier.ChannelIndex) {
	if c.nblock == 0 {
		c.alignAt = time.Now()
	}
	if !c.blocked[ch] {
		c.blocked[ch] = true
		c.nblock++
	}
}

// ResumeAllChannels implements barrier.Controller.
func (c *checkpointer) ResumeAllChannels() {
	for i, b := range c.blocked {
		if b {
			c.blocked[i] = false
			c.t.cfg.Gate.Resume(i)
		}
	}
	c.nblock = 0
}

// TriggerCheckpoint implements barrier.Controller: every input delivered
// barrier b.
func (c *checkpointer) TriggerCheckpoint(b barrier.Barrier) {
	var align time.Duration
	if !c.alignAt.IsZero() {
		align = time.Since(c.alignAt)
		c.alignAt = time.Time{}
	}
	if err := c.t.performCheckpoint(b, align); err != nil && c.failure == nil {
		c.failure = err
	}
}

// AbortCheckpoint implements barrier.Controller: forward a cancel marker
// and decline.
func (c *checkpointer) AbortCheckpoint(id barrier.CheckpointID, reason barrier.AbortReason) {
	c.alignAt = time.Time{}
	c.dropState(id)
	c.t.broadcastEvent(cancelPayload(id), buffer.Event)
	c.t.decline(id, barrier.DeclineReasonOf(reason), nil)
}

func (t *Task) broadcastEvent(payload []byte, dt buffer.DataType) {
	for _, p := range t.cfg.Outputs {
		p.BroadcastEvent(payload, dt)
	}
}

// TriggerCheckpoint asks a source task to take checkpoint b: in its next
// mailbox step it snapshots and injects the barrier. Safe from any
// goroutine. A task that cannot take it declines with a
// *barrier.DeclineError: DeclineTaskFinished once its input ended, and
// DeclineTaskFinished or DeclineTaskCanceled when it stopped before the
// trigger ran.
func (t *Task) TriggerCheckpoint(b barrier.Barrier) {
	if t.ckpt == nil {
		return
	}
	err := t.postMail(mail{
		run: func() error {
			switch {
			case t.fin.waiting:
				return t.performFinalCheckpoint(b)
			case t.inputEnded:
				t.decline(b.ID, barrier.DeclineTaskFinished, nil)
				return nil
			case t.cfg.Source == nil:
				// Its upstream tasks finished: triggered by the end of
				// its input.
				return t.triggerAtEnd(b)
			}
			return t.performCheckpoint(b, 0)
		},
		drop: func(finished bool) { t.declineStopped(b.ID, finished) },
	})
	if err != nil {
		t.declineStopped(b.ID, t.State() == Finished)
	}
}

// declineStopped declines checkpoint id of a task that stopped.
func (t *Task) declineStopped(id barrier.CheckpointID, finished bool) {
	if finished {
		t.decline(id, barrier.DeclineTaskFinished, nil)
	} else {
		t.decline(id, barrier.DeclineTaskCanceled, nil)
	}
}

// decline tells the coordinator that the task cannot take checkpoint id.
func (t *Task) decline(id barrier.CheckpointID, reason barrier.DeclineReason, cause error) {
	if cause != nil {
		cause = fmt.Errorf("task %s: %w", t.cfg.Name, cause)
	} else {
		cause = fmt.Errorf("task %s", t.cfg.Name)
	}
	t.ckpt.cfg.Responder.Decline(t.cfg.Key, id, barrier.Decline(reason, cause))
}

// NotifyCheckpointComplete tells the task's operators that checkpoint id
// completed. Safe from any goroutine; ignored once the task stopped.
func (t *Task) NotifyCheckpointComplete(id barrier.CheckpointID) {
	t.postNotification("complete", id, func() error {
		for i, op := range t.cfg.Operators {
			if err := op.NotifyCheckpointComplete(id); err != nil {
				return &Error{Task: t.cfg.Name, Operator: op.Name(), Err: fmt.Errorf("checkpoint %d complete: %w", id, err)}
			}
			if i < len(t.states) {
				if l, ok := t.states[i].keyed.(state.CheckpointListener); ok {
					l.NotifyCheckpointComplete(id)
				}
			}
		}
		t.finalCompleted(id)
		return nil
	})
}

// NotifyCheckpointAborted tells the task that checkpoint id was aborted: an
// alignment for it stops, operators are told. Safe from any goroutine.
func (t *Task) NotifyCheckpointAborted(id barrier.CheckpointID) {
	t.postNotification("aborted", id, func() error {
		if t.ckpt != nil && t.ckpt.handler != nil {
			t.ckpt.handler.Abort(id)
		}
		if t.ckpt != nil {
			t.ckpt.dropState(id)
			t.finalAborted(id)
		}
		for _, op := range t.cfg.Operators {
			if err := op.NotifyCheckpointAborted(id); err != nil {
				return &Error{Task: t.cfg.Name, Operator: op.Name(), Err: fmt.Errorf("checkpoint %d aborted: %w", id, err)}
			}
		}
		return nil
	})
}

// postNotification posts a checkpoint notification. A task that stopped
// before it ran does not need it: a finished two-phase-commit sink handed
// its transactions to the job's final commit, and a failed or canceled
// task's successor restores from the latest completed checkpoint and
// commits what it holds. It is logged, not lost silently.
func (t *Task) postNotification(what string, id barrier.CheckpointID, run func() error) {
	logDrop := func(bool) {
		t.log.Debug("checkpoint notification after the task stopped", zap.String("outcome", what), zap.Uint64("checkpoint", uint64(id)))
	}
	if err := t.postMail(mail{run: run, drop: logDrop}); err != nil {
		logDrop(false)
	}
}

// performCheckpoint takes checkpoint b in one mailbox step: operators
// prepare, the barrier goes downstream, the synchronous snapshot runs, and
// the asynchronous part is started off the mailbox. It returns an error
// only for failures that must fail the task (a user hook that fails).
func (t *Task) performCheckpoint(b barrier.Barrier, align time.Duration) error {
	c := t.ckpt
	start := time.Now()
	m := CheckpointMetrics{AlignmentDuration: align}
	if b.Timestamp > 0 {
		m.StartDelay = max(0, start.Sub(time.UnixMilli(b.Timestamp)))
	}
	for _, op := range t.cfg.Operators {
		if err := op.PrepareSnapshotPreBarrier(b.ID); err != nil {
			return &Error{Task: t.cfg.Name, Operator: op.Name(), Err: fmt.Errorf("prepare checkpoint %d: %w", b.ID, err)}
		}
	}
	chs := t.emitBarrier(b)

	parts := make([]snapshotPart, 0, len(t.cfg.Operators))
	// Every asynchronous part must run exactly once (state.Snapshot's
	// contract): when a later operator fails, the earlier ones are
	// abandoned, which releases what they hold.
	abandon := func() {
		for _, p := range parts {
			p.abandon()
		}
	}
	for i, op := range t.cfg.Operators {
		if err := op.SnapshotState(b.ID); err != nil {
			abandon()
			c.dropState(b.ID)
			return &Error{Task: t.cfg.Name, Operator: op.Name(), Err: fmt.Errorf("snapshot checkpoint %d: %w", b.ID, err)}
		}
		st := t.states[i]
		p := snapshotPart{opID: op.ID(), name: op.Name(), schemas: st.schemas()}
		if k, ok := op.(KindedOperator); ok {
			p.kind = k.Kind()
		}
		owner := state.FileOwner{Vertex: t.cfg.Key.Vertex, Subtask: t.cfg.Key.Subtask, Operator: op.ID()}
		w := state.PrefixedWriters(c.cfg.Storage.ForOwner(owner), st.prefix)
		if b.Options.Kind == barrier.Savepoint {
			w = state.FullSnapshotsOnly(w) // savepoints are self-contained
		}
		var err error
		if st.keyed != nil {
			p.keyed, err = st.keyed.Snapshot(b.ID, w)
		}
		if err == nil {
			p.oper, err = st.operator.Snapshot(b.ID, w)
		}
		if err != nil {
			p.abandon()
			abandon()
			c.dropState(b.ID)
			t.declineSnapshot(b.ID, op, err)
			return nil
		}
		parts = append(parts, p)
	}
	m.SyncDuration = time.Since(start)

	t.asyncWG.Add(1)
	go func() {
		defer t.asyncWG.Done()
		astart := time.Now()
		snap := state.TaskSnapshot{Operators: make(map[string]state.OperatorSubtaskState, len(parts))}
		var firstErr error
		for _, p := range parts {
			os := state.OperatorSubtaskState{Name: p.name, Kind: p.kind, Schemas: p.schemas}
			if p.keyed != nil {
				h, err := p.keyed(t.runCtx)
				if err != nil && firstErr == nil {
					firstErr = err
				}
				os.Keyed = h
			}
			h, err := p.oper(t.runCtx)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			os.Operator = h
			snap.Operators[p.opID] = os
		}
		if firstErr == nil && chs != nil {
			h, ok, err := t.writeChannelState(t.runCtx, chs)
			switch {
			case err != nil:
				firstErr = err
			case !ok:
				return // aborted: the task or the coordinator knows
			}
			snap.Channels = h
		}
		if firstErr != nil {
			if t.runCtx.Err() != nil {
				// The task is being canceled: its attempt is over, this
				// is not a checkpoint failure.
				t.decline(b.ID, barrier.DeclineTaskCanceled, errors.New("canceled during the asynchronous snapshot"))
				return
			}
			t.log.Warn("asynchronous snapshot failed", zap.Uint64("checkpoint", uint64(b.ID)), zap.Error(firstErr))
			t.decline(b.ID, barrier.DeclineSnapshotFailed, fmt.Errorf("asynchronous snapshot: %w", firstErr))
			return
		}
		m.AsyncDuration = time.Since(astart)
		m.StateSize = snap.Size()
		c.cfg.Responder.Acknowledge(t.cfg.Key, b.ID, snap, m)
	}()
	return nil
}

// snapshotPart is one operator's asynchronous snapshot work.
type snapshotPart struct {
	opID    string
	name    string
	kind    string
	schemas []state.StateSchema
	keyed   state.KeyedSnapshotFunc    // nil for non-keyed operators
	oper    state.OperatorSnapshotFunc // nil if its synchronous part failed
}

// abandon runs the asynchronous parts with a canceled context: they
// release their resources and write nothing.
func (p snapshotPart) abandon() {
	if p.keyed != nil {
		_, _ = p.keyed(canceledCtx)
	}
	if p.oper != nil {
		_, _ = p.oper(canceledCtx)
	}
}

var canceledCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func (t *Task) declineSnapshot(id barrier.CheckpointID, op Operator, err error) {
	t.log.Warn("snapshot failed", zap.Uint64("checkpoint", uint64(id)), zap.String("operator", op.Name()), zap.Error(err))
	t.decline(id, barrier.DeclineSnapshotFailed, fmt.Errorf("operator %s: snapshot: %w", op.Name(), err))
}

// statePrefix is a file-name-safe, unique prefix for one operator's state
// files of one subtask.
func statePrefix(key state.TaskKey, opIndex int, opID string) string {
	return fmt.Sprintf("%s-%d-op%d-%s", fileSafe(key.Vertex), key.Subtask, opIndex, fileSafe(opID))
}

// fileSafe replaces every rune outside [A-Za-z0-9_-] with '_'.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
}

// initStates creates (and restores) every operator's state backends.
func (t *Task) initStates() error {
	t.states = make([]opState, len(t.cfg.Operators))
	rng := keygroup.RangeFor(t.cfg.MaxParallelism, t.cfg.Parallelism, t.cfg.Key.Subtask)
	for i, op := range t.cfg.Operators {
		st := &t.states[i]
		st.prefix = statePrefix(t.cfg.Key, i, op.ID())
		st.operator = state.NewOperatorBackend()
		if op.Keyed() {
			kb, err := t.cfg.NewKeyedBackend(t.cfg.MaxParallelism, t.cfg.Parallelism, t.cfg.Key.Subtask)
			if err != nil {
				return &Error{Task: t.cfg.Name, Operator: op.Name(), Err: fmt.Errorf("keyed state backend: %w", err)}
			}
			st.keyed = kb
		}
		r := t.cfg.Restore
		if r == nil {
			continue
		}
		prev := r.Operators[op.ID()]
		st.restoreSchemas(op.Name(), prev)
		var keyed []state.KeyedStateHandle
		var oper []*state.OperatorStateHandle
		for _, s := range prev {
			if s.Keyed != nil && s.Keyed.KeyGroups.Start <= rng.End && s.Keyed.KeyGroups.End >= rng.Start {
				keyed = append(keyed, *s.Keyed)
			}
			oper = append(oper, s.Operator)
		}
		if st.keyed != nil && len(keyed) > 0 {
			if err := st.keyed.Restore(keyed, r.Reader); err != nil {
				return &Error{Task: t.cfg.Name, Operator: op.Name(), Err: fmt.Errorf("restore keyed state from checkpoint %d: %w", r.ID, err)}
			}
		}
		if err := st.operator.Restore(oper, r.Reader, t.cfg.Key.Subtask, t.cfg.Parallelism); err != nil {
			return &Error{Task: t.cfg.Name, Operator: op.Name(), Err: fmt.Errorf("restore operator state from checkpoint %d: %w", r.ID, err)}
		}
	}
	return nil
}

// closeStates closes the keyed backends and returns their errors (a
// pebble database that could not close or remove its directory).
func (t *Task) closeStates() error {
	var errs []error
	for i, st := range t.states {
		if st.keyed != nil {
			if err := st.keyed.Close(); err != nil {
				errs = append(errs, &Error{Task: t.cfg.Name, Operator: t.cfg.Operators[i].Name(), Err: fmt.Errorf("close keyed state: %w", err)})
			}
		}
	}
	return errors.Join(errs...)
}
