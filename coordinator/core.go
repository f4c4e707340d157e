package coordinator

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/state"
)

// This file is the coordinator's pure core: a single-goroutine state machine
// with no goroutines, clocks, randomness or I/O. Time enters as the now
// argument of every input; everything the caller must do comes out as
// effects (take them with ready), to be carried out in order. Results of
// I/O come back in as inputs (persisted, triggerFailed).

// requestID names one manual checkpoint or savepoint request; 0 is a
// periodic trigger.
type requestID uint64

type request struct {
	id       requestID
	kind     barrier.Kind
	dir      string // savepoint target directory
	terminal bool   // a savepoint the job stops at
}

// attempt is one deployed execution attempt of the job.
type attempt struct {
	sources []state.TaskKey
	all     []state.TaskKey
	tasks   map[state.TaskKey]struct{}
	gw      TaskGateway // carried in effects, never called by the core

	// running holds the tasks that reported running; checkpoints start
	// only once every task did (Flink's NOT_ALL_REQUIRED_TASKS_RUNNING).
	running map[state.TaskKey]struct{}
	// finished holds the tasks that finished (FLIP-147): they are no
	// longer triggered nor expected to acknowledge, and checkpoints record
	// them as finished.
	finished map[state.TaskKey]struct{}
	// upstream, if not nil, lists each task's upstream tasks: a task whose
	// upstream tasks all finished is triggered directly, like a source.
	upstream map[state.TaskKey][]state.TaskKey
	// operators, if not nil, lists the operators of each vertex, which
	// checkpoints record finished for a finished task.
	operators map[string][]Operator
}

// allRunning reports whether every task reported running (or finished).
func (a *attempt) allRunning() bool {
	for _, t := range a.all {
		_, r := a.running[t]
		_, f := a.finished[t]
		if !r && !f {
			return false
		}
	}
	return true
}

func (a *attempt) isFinished(t state.TaskKey) bool {
	_, ok := a.finished[t]
	return ok
}

// targets returns the tasks a new checkpoint triggers: the sources that
// have not finished and, with the topology known, every other task that
// has not finished while all its upstream tasks have (Flink's
// CheckpointPlanCalculator).
func (a *attempt) targets() []state.TaskKey {
	var out []state.TaskKey
	for _, s := range a.sources {
		if !a.isFinished(s) {
			out = append(out, s)
		}
	}
	if a.upstream == nil || len(a.finished) == 0 {
		return out
	}
	for _, t := range a.all {
		ups, ok := a.upstream[t]
		if !ok || len(ups) == 0 || a.isFinished(t) {
			continue
		}
		all := true
		for _, u := range ups {
			all = all && a.isFinished(u)
		}
		if all {
			out = append(out, t)
		}
	}
	return out
}

func newAttempt(sources, all []state.TaskKey, gw TaskGateway) (*attempt, error) {
	if len(all) == 0 {
		return nil, fmt.Errorf("coordinator: attach: no tasks")
	}
	if len(sources) == 0 {
		return nil, fmt.Errorf("coordinator: attach: no source tasks")
	}
	if gw == nil {
		return nil, fmt.Errorf("coordinator: attach: nil gateway")
	}
	a := &attempt{
		sources:  slices.Clone(sources),
		all:      slices.Clone(all),
		tasks:    make(map[state.TaskKey]struct{}, len(all)),
		gw:       gw,
		running:  make(map[state.TaskKey]struct{}, len(all)),
		finished: make(map[state.TaskKey]struct{}),
	}
	for _, t := range all {
		if _, dup := a.tasks[t]; dup {
			return nil, fmt.Errorf("coordinator: attach: task %v listed twice", t)
		}
		a.tasks[t] = struct{}{}
	}
	seen := make(map[state.TaskKey]struct{}, len(sources))
	for _, s := range sources {
		if _, ok := a.tasks[s]; !ok {
			return nil, fmt.Errorf("coordinator: attach: source %v is not among the tasks", s)
		}
		if _, dup := seen[s]; dup {
			return nil, fmt.Errorf("coordinator: attach: source %v listed twice", s)
		}
		seen[s] = struct{}{}
	}
	return a, nil
}

// pending is a checkpoint in progress: triggered, collecting one ack per
// task of its attempt that had not finished, then (finalizing) waiting for
// its metadata write.
type pending struct {
	id         barrier.CheckpointID
	kind       barrier.Kind
	req        request
	timestamp  int64 // unix ms of the trigger
	deadline   time.Time
	att        *attempt
	expected   map[state.TaskKey]struct{} // the tasks that must acknowledge
	finished   []state.TaskKey            // the tasks that had finished at the trigger
	acks       map[state.TaskKey]state.TaskSnapshot
	finalizing bool
	stats      *CheckpointStats
}

func (p *pending) metadata() state.Metadata {
	tasks := maps.Clone(p.acks)
	for _, t := range p.finished {
		ops := map[string]state.OperatorSubtaskState{}
		for _, op := range p.att.operators[t.Vertex] {
			ops[op.ID] = state.OperatorSubtaskState{Name: op.Name, Kind: op.Kind, Finished: true}
		}
		tasks[t] = state.TaskSnapshot{Operators: ops, Finished: true}
	}
	return state.Metadata{ID: p.id, Timestamp: p.timestamp, Kind: p.kind, Tasks: tasks}
}

// tasks lists the tasks expected to acknowledge, in the attempt's order.
func (p *pending) tasks() []state.TaskKey {
	out := make([]state.TaskKey, 0, len(p.expected))
	for _, t := range p.att.all {
		if _, ok := p.expected[t]; ok {
			out = append(out, t)
		}
	}
	return out
}

// Effects: what the caller of the core must do, in order.
type effect interface{ isEffect() }

type (
	// triggerTask: call gw.TriggerCheckpoint(task, barrier); on error feed
	// triggerFailed.
	triggerTask struct {
		gw      TaskGateway
		task    state.TaskKey
		barrier barrier.Barrier
	}
	notifyComplete struct {
		gw   TaskGateway
		task state.TaskKey
		id   barrier.CheckpointID
	}
	notifyAborted struct {
		gw   TaskGateway
		task state.TaskKey
		id   barrier.CheckpointID
	}
	// persist: write meta durably (a checkpoint: Storage.WriteMetadata; a
	// savepoint: Storage.ExportSavepoint into dir), then feed persisted.
	persist struct {
		meta state.Metadata
		dir  string
	}
	// discard: Storage.Discard(id).
	discard struct{ id barrier.CheckpointID }
	// resolve: hand the result to the waiter of request req.
	resolve struct {
		req  requestID
		meta state.Metadata
		path string
		err  error
	}
	// failJob: report a job failure.
	failJob struct{ err error }
)

func (triggerTask) isEffect()    {}
func (notifyComplete) isEffect() {}
func (notifyAborted) isEffect()  {}
func (persist) isEffect()        {}
func (discard) isEffect()        {}
func (resolve) isEffect()        {}
func (failJob) isEffect()        {}

// ackOutcome says what became of an acknowledgement.
type ackOutcome uint8

const (
	ackAccepted    ackOutcome = iota // recorded; more acks to come
	ackLast                          // recorded; all in, metadata write requested
	ackDuplicate                     // the task already acknowledged
	ackUnknownTask                   // not a task of the checkpoint's attempt
	ackLate                          // checkpoint no longer pending: state discarded
	ackUnknownID                     // never triggered, or completed: ignored
)

func (o ackOutcome) String() string {
	return [...]string{"accepted", "last", "duplicate", "unknown-task", "late", "unknown-id"}[o]
}

// core is the pure checkpoint coordinator. Not safe for concurrent use.
type core struct {
	cfg    Config // validated, with defaults
	nextID barrier.CheckpointID
	att    *attempt // nil while detached
	closed bool

	pending map[barrier.CheckpointID]*pending
	queue   []request // manual checkpoint requests waiting for a free slot

	periodicDue      time.Time // next periodic trigger; zero: none scheduled
	periodicDeferred bool      // a periodic trigger waits for a free slot
	stopping         bool      // a terminal savepoint is in progress or done
	lastCompletion   time.Time // of the newest completed checkpoint
	completedOnce    bool

	store    []state.Metadata // completed checkpoints, oldest first
	restored *state.Metadata  // restore point not (yet) in store: a savepoint

	consecutive   int
	counted       map[barrier.CheckpointID]struct{}
	lastSucceeded barrier.CheckpointID

	stats statsTracker
	out   []effect
}

func newCore(cfg Config) *core {
	cfg = cfg.withDefaults()
	return &core{
		cfg:     cfg,
		nextID:  1,
		pending: make(map[barrier.CheckpointID]*pending),
		counted: make(map[barrier.CheckpointID]struct{}),
		stats:   statsTracker{size: cfg.HistorySize},
	}
}

// ready returns the effects produced so far and forgets them.
func (c *core) ready() []effect {
	out := c.out
	c.out = nil
	return out
}

func (c *core) emit(e effect) { c.out = append(c.out, e) }

// attach starts checkpointing for a newly deployed attempt. The first
// periodic trigger is due initialDelay after now.
func (c *core) attach(a *attempt, now time.Time, initialDelay time.Duration) error {
	switch {
	case c.closed:
		return ErrClosed
	case c.att != nil:
		return ErrAttached
	}
	c.att = a
	c.stopping = false
	if c.cfg.Interval > 0 {
		c.periodicDue = now.Add(initialDelay)
	}
	return nil
}

// detach aborts every pending checkpoint and queued request, and pauses
// the periodic scheduler, because the attempt failed (reason) or finished
// (reason nil: the checkpoints are aborted by the job's end,
// ErrJobFinished, not failed).
func (c *core) detach(reason error, now time.Time) bool {
	if c.att == nil {
		return false
	}
	why := ErrDetached
	if reason == nil {
		why = ErrJobFinished
	}
	c.abortAll(why, reason, now)
	c.att = nil
	return true
}

func (c *core) abortAll(why, cause error, now time.Time) {
	for _, p := range c.sortedPending() {
		c.abort(p, &CheckpointError{ID: p.id, Kind: p.kind, Reason: why, Err: cause}, now)
	}
	for _, r := range c.queue {
		c.emit(resolve{req: r.id, err: &CheckpointError{Kind: r.kind, Reason: why, Err: cause}})
	}
	c.queue = nil
	c.periodicDue = time.Time{}
	c.periodicDeferred = false
}

// JobStatus is how a job ended, for Shutdown's retention decision.
type JobStatus uint8

const (
	// JobFinished: completed checkpoints are deleted.
	JobFinished JobStatus = iota
	// JobCanceled: deleted unless Config.RetainOnCancel.
	JobCanceled
	// JobFailed: the job failed terminally; checkpoints are kept.
	JobFailed
	// JobSuspended: the coordinator stops but the job lives on elsewhere
	// (what Close does); checkpoints are kept.
	JobSuspended
)

func (s JobStatus) String() string {
	switch s {
	case JobFinished:
		return "finished"
	case JobCanceled:
		return "canceled"
	case JobFailed:
		return "failed"
	case JobSuspended:
		return "suspended"
	}
	return fmt.Sprintf("JobStatus(%d)", uint8(s))
}

// shutdown aborts everything and applies the retention policy for status.
// It reports false if the core was already shut down.
func (c *core) shutdown(status JobStatus, now time.Time) bool {
	if c.closed {
		return false
	}
	c.abortAll(ErrClosed, nil, now)
	c.att = nil
	c.closed = true
	if status == JobFinished || (status == JobCanceled && !c.cfg.RetainOnCancel) {
		for _, m := range c.store {
			c.emit(discard{m.ID})
		}
		c.store = nil
	}
	return true
}

// restore seeds the store and the next ID from the checkpoint or savepoint
// the job starts from. It becomes the latest completed restore point;
// newer entries of the store leave it (they are not discarded). A claimed
// checkpoint joins the store and is subject to retention; a savepoint or
// an unclaimed checkpoint (one in another job's storage) is never
// discarded.
func (c *core) restore(m state.Metadata, claim bool) error {
	switch {
	case c.closed:
		return ErrClosed
	case c.att != nil:
		return ErrAttached
	case m.ID == 0:
		return fmt.Errorf("coordinator: restore: checkpoint ID 0")
	}
	c.nextID = max(c.nextID, m.ID+1)
	c.store = slices.DeleteFunc(c.store, func(s state.Metadata) bool { return s.ID >= m.ID })
	if m.Kind == barrier.Savepoint || !claim {
		c.restored = &m
		return nil
	}
	c.restored = nil
	c.store = append(c.store, m)
	c.retain()
	return nil
}

// taskRunning records that a task of the attached attempt is running;
// once every task is, waiting checkpoints start. It reports whether the
// task was unknown.
func (c *core) taskRunning(task state.TaskKey, now time.Time) bool {
	if c.att == nil {
		return false
	}
	if _, ok := c.att.tasks[task]; !ok {
		return false
	}
	c.att.running[task] = struct{}{}
	c.schedule(now)
	return true
}

// taskFinished records that a task of the attached attempt finished: it
// is no longer triggered nor expected to acknowledge, later checkpoints
// record it as finished, and a pending checkpoint it did not acknowledge
// can no longer complete (it is aborted; that does not count as a
// failure). It reports whether the task was unknown.
func (c *core) taskFinished(task state.TaskKey, now time.Time) bool {
	if c.att == nil {
		return false
	}
	if _, ok := c.att.tasks[task]; !ok {
		return false
	}
	c.att.finished[task] = struct{}{}
	for _, p := range c.sortedPending() {
		_, expected := p.expected[task]
		_, acked := p.acks[task]
		if p.att == c.att && !p.finalizing && expected && !acked {
			c.abort(p, &CheckpointError{ID: p.id, Kind: p.kind, Reason: ErrDeclined,
				Err: fmt.Errorf("task %s/%d: %w", task.Vertex, task.Subtask, barrier.Decline(barrier.DeclineTaskFinished, nil))}, now)
		}
	}
	c.schedule(now)
	return true
}

// taskFinishing records that a task's input ended and that it waits for
// a final checkpoint (to commit what it holds) before it finishes: the
// next checkpoint is due at once.
func (c *core) taskFinishing(task state.TaskKey, now time.Time) bool {
	if c.att == nil {
		return false
	}
	if _, ok := c.att.tasks[task]; !ok {
		return false
	}
	if !c.stopping {
		c.periodicDeferred = true
	}
	c.schedule(now)
	return true
}

// latest returns the newest restore point.
func (c *core) latest() (state.Metadata, bool) {
	if c.restored != nil {
		return *c.restored, true
	}
	if len(c.store) == 0 {
		return state.Metadata{}, false
	}
	return c.store[len(c.store)-1], true
}

// request asks for a manual checkpoint or a savepoint. Savepoints start at
// once; checkpoints wait in a queue for a free slot (max concurrent) but not
// for min pause (as in Flink, which holds back only periodic triggers).
func (c *core) request(r request, now time.Time) {
	switch {
	case c.closed:
		c.emit(resolve{req: r.id, err: ErrClosed})
		return
	case c.att == nil:
		c.emit(resolve{req: r.id, err: ErrNotAttached})
		return
	}
	if r.kind == barrier.Savepoint {
		if r.terminal {
			if c.stopping {
				c.emit(resolve{req: r.id, err: ErrStopping})
				return
			}
			// Nothing after the job's last savepoint: no periodic or
			// queued checkpoint starts until it failed.
			c.stopping = true
		}
		if c.att.allRunning() {
			c.start(r, now)
			return
		}
	}
	// Checkpoints wait for a free slot, and everything waits until every
	// task runs.
	c.queue = append(c.queue, r)
	c.schedule(now)
}

// cancelRequest drops a queued request; one already triggered goes on.
func (c *core) cancelRequest(id requestID) bool {
	n := len(c.queue)
	c.queue = slices.DeleteFunc(c.queue, func(r request) bool { return r.id == id })
	return len(c.queue) < n
}

// tick advances time: it expires overdue checkpoints and fires a due
// periodic trigger.
func (c *core) tick(now time.Time) {
	for _, p := range c.sortedPending() {
		if !now.Before(p.deadline) {
			c.abort(p, &CheckpointError{ID: p.id, Kind: p.kind, Reason: ErrExpired,
				Err: fmt.Errorf("not complete after %v", c.cfg.Timeout)}, now)
		}
	}
	if c.att != nil && !c.stopping && !c.periodicDue.IsZero() && !now.Before(c.periodicDue) {
		// Fixed rate: the next one is due a whole number of intervals on.
		n := now.Sub(c.periodicDue)/c.cfg.Interval + 1
		c.periodicDue = c.periodicDue.Add(n * c.cfg.Interval)
		c.periodicDeferred = true // coalesces with one already deferred
	}
	c.schedule(now)
}

// nextDeadline is when tick must next be called.
func (c *core) nextDeadline() (time.Time, bool) {
	var next time.Time
	ok := false
	consider := func(t time.Time) {
		if !ok || t.Before(next) {
			next, ok = t, true
		}
	}
	if c.att != nil && !c.stopping && !c.periodicDue.IsZero() {
		consider(c.periodicDue)
	}
	for _, p := range c.pending {
		consider(p.deadline)
	}
	return next, ok
}

func (c *core) slotFree() bool { return len(c.pending) < c.cfg.MaxConcurrent }

// schedule starts whatever waits, once every task of the attempt runs:
// queued savepoints, queued manual checkpoints while a slot is free
// (FIFO), then a deferred periodic trigger, which is rescheduled instead
// if min pause has not yet passed.
func (c *core) schedule(now time.Time) {
	if c.att == nil || !c.att.allRunning() {
		return
	}
	waiting := c.queue[:0]
	for _, r := range c.queue {
		switch {
		case r.kind == barrier.Savepoint:
			c.start(r, now) // not held back by max concurrent
		case !c.stopping && c.slotFree():
			c.start(r, now)
		default:
			waiting = append(waiting, r)
		}
	}
	clear(c.queue[len(waiting):])
	c.queue = waiting
	if c.stopping || !c.periodicDeferred || len(c.queue) > 0 || !c.slotFree() {
		return
	}
	c.periodicDeferred = false
	if allowed := c.lastCompletion.Add(c.cfg.MinPause); c.completedOnce && now.Before(allowed) {
		// Too early: move the periodic schedule to when it is allowed.
		c.periodicDue = allowed
		return
	}
	c.start(request{kind: barrier.Checkpoint}, now)
}

func (c *core) start(r request, now time.Time) {
	targets := c.att.targets()
	if len(targets) == 0 {
		// Every task finished, or waits for an upstream task to finish.
		if r.id != 0 {
			c.emit(resolve{req: r.id, err: &CheckpointError{Kind: r.kind, Reason: ErrAllFinished}})
		}
		return
	}
	id := c.nextID
	c.nextID++
	opts := c.cfg.checkpointOptions()
	if r.kind == barrier.Savepoint {
		opts = barrier.Options{Kind: barrier.Savepoint, Alignment: barrier.Aligned}
	}
	b := barrier.Barrier{ID: id, Timestamp: now.UnixMilli(), Options: opts}
	p := &pending{
		id:        id,
		kind:      r.kind,
		req:       r,
		timestamp: b.Timestamp,
		deadline:  now.Add(c.cfg.Timeout),
		att:       c.att,
		expected:  make(map[state.TaskKey]struct{}, len(c.att.all)),
		acks:      make(map[state.TaskKey]state.TaskSnapshot, len(c.att.all)),
	}
	for _, t := range c.att.all {
		if c.att.isFinished(t) {
			p.finished = append(p.finished, t)
		} else {
			p.expected[t] = struct{}{}
		}
	}
	p.stats = c.stats.begin(id, r.kind, len(p.expected), now)
	c.pending[id] = p
	for _, s := range targets {
		c.emit(triggerTask{gw: c.att.gw, task: s, barrier: b})
	}
}

// ack records a task's acknowledgement.
func (c *core) ack(task state.TaskKey, id barrier.CheckpointID, snap state.TaskSnapshot, m TaskCheckpointMetrics, now time.Time) ackOutcome {
	p := c.pending[id]
	if p == nil {
		if id == 0 || id >= c.nextID || c.isRestorePoint(id) {
			return ackUnknownID
		}
		// Aborted (or subsumed and discarded): whatever the task wrote
		// for it is garbage.
		c.emit(discard{id})
		return ackLate
	}
	if _, ok := p.expected[task]; !ok {
		return ackUnknownTask
	}
	if _, dup := p.acks[task]; dup {
		return ackDuplicate
	}
	p.acks[task] = snap
	if m.StateSize == 0 {
		m.StateSize = snap.Size()
	}
	c.stats.ack(p.stats, task, snap.Size(), m, now)
	if len(p.acks) < len(p.expected) {
		return ackAccepted
	}
	p.finalizing = true
	c.emit(persist{meta: p.metadata(), dir: p.req.dir})
	return ackLast
}

func (c *core) isRestorePoint(id barrier.CheckpointID) bool {
	if c.restored != nil && c.restored.ID == id {
		return true
	}
	return slices.ContainsFunc(c.store, func(m state.Metadata) bool { return m.ID == id })
}

// decline aborts checkpoint id because task cannot take it. Whether that
// counts as a checkpoint failure depends on the reason (a
// *barrier.DeclineError; an untyped reason counts).
func (c *core) decline(task state.TaskKey, id barrier.CheckpointID, reason error, now time.Time) bool {
	p := c.pending[id]
	if p == nil || p.finalizing {
		return false
	}
	if _, ok := p.expected[task]; !ok {
		return false
	}
	c.abort(p, &CheckpointError{ID: id, Kind: p.kind, Reason: ErrDeclined,
		Err: fmt.Errorf("task %s/%d: %w", task.Vertex, task.Subtask, reason)}, now)
	c.schedule(now)
	return true
}

// triggerFailed aborts checkpoint id because a source could not be
// triggered (does not count as a checkpoint failure, as in Flink).
func (c *core) triggerFailed(task state.TaskKey, id barrier.CheckpointID, err error, now time.Time) {
	p := c.pending[id]
	if p == nil || p.finalizing {
		return
	}
	c.abort(p, &CheckpointError{ID: id, Kind: p.kind, Reason: ErrTriggerFailed,
		Err: fmt.Errorf("task %s/%d: %w", task.Vertex, task.Subtask, err)}, now)
	c.schedule(now)
}

// persisted reports the result of a persist effect.
func (c *core) persisted(id barrier.CheckpointID, path string, err error, now time.Time) {
	p := c.pending[id]
	if p == nil || !p.finalizing {
		// Aborted while its metadata was being written: if the write went
		// through, the checkpoint exists on disk and must go.
		if !c.isRestorePoint(id) {
			c.emit(discard{id})
		}
		return
	}
	if err != nil {
		c.abort(p, &CheckpointError{ID: id, Kind: p.kind, Reason: ErrFinalize, Err: err}, now)
	} else {
		c.complete(p, path, now)
	}
	c.schedule(now)
}

func (c *core) complete(p *pending, path string, now time.Time) {
	delete(c.pending, p.id)
	meta := p.metadata()
	c.lastCompletion, c.completedOnce = now, true
	switch {
	case p.req.terminal:
		// The job stops here: this savepoint is its restore point should
		// it fail before it ended (its staging files stay until then).
		c.store = append(c.store, meta)
		c.restored = nil
		c.retain()
		c.succeeded(p.id)
	case p.kind == barrier.Savepoint:
		// The export is self-contained; the staging files are not needed.
		c.emit(discard{p.id})
	default:
		c.store = append(c.store, meta)
		c.restored = nil
		c.retain()
		c.succeeded(p.id)
		for _, q := range c.sortedPending() {
			if q.id < p.id && q.kind == barrier.Checkpoint {
				c.abort(q, &CheckpointError{ID: q.id, Kind: q.kind, Reason: ErrSubsumed,
					Err: fmt.Errorf("by checkpoint %d", p.id)}, now)
			}
		}
	}
	c.stats.complete(p.stats, path, now)
	if p.kind == barrier.Checkpoint || p.req.terminal {
		// An intermediate savepoint commits no side effects (as in Flink
		// since 1.15): it is not a restore point, so a transaction
		// committed for it would be replayed after a failover to an older
		// checkpoint. Its transactions are committed by the next
		// checkpoint, or by a job that starts from it. The savepoint a job
		// stops at commits them.
		for _, t := range p.tasks() {
			c.emit(notifyComplete{gw: p.att.gw, task: t, id: p.id})
		}
	}
	if p.req.id != 0 {
		c.emit(resolve{req: p.req.id, meta: meta, path: path})
	}
}

// retain keeps the newest Retained checkpoints and discards the rest.
func (c *core) retain() {
	for len(c.store) > c.cfg.Retained {
		c.emit(discard{c.store[0].ID})
		c.store = c.store[1:]
	}
}

func (c *core) abort(p *pending, cerr *CheckpointError, now time.Time) {
	delete(c.pending, p.id)
	if cerr.Reason == ErrJobFinished {
		c.stats.abortedByEnd(p.stats, cerr, now)
	} else {
		c.stats.fail(p.stats, cerr, now)
	}
	for _, t := range p.tasks() {
		c.emit(notifyAborted{gw: p.att.gw, task: t, id: p.id})
	}
	c.emit(discard{p.id})
	if p.req.id != 0 {
		c.emit(resolve{req: p.req.id, err: cerr})
	}
	if p.req.terminal {
		// The job does not stop: checkpointing goes on.
		c.stopping = false
		if c.att != nil && c.cfg.Interval > 0 {
			c.periodicDue = now
		}
	}
	if cerr.counts() {
		c.failed(p.id, cerr)
	}
}

// failed counts a checkpoint failure (once per ID, and only if no newer
// checkpoint has completed) and fails the job when the count exceeds
// TolerableFailures (Flink's CheckpointFailureManager).
func (c *core) failed(id barrier.CheckpointID, cerr *CheckpointError) {
	if id <= c.lastSucceeded {
		return
	}
	if _, dup := c.counted[id]; dup {
		return
	}
	c.counted[id] = struct{}{}
	c.consecutive++
	if c.consecutive > c.cfg.TolerableFailures {
		c.emit(failJob{fmt.Errorf("%w: %d consecutive, %d tolerated; last: %w",
			ErrTooManyFailures, c.consecutive, c.cfg.TolerableFailures, cerr)})
		c.consecutive = 0
		clear(c.counted)
	}
}

func (c *core) succeeded(id barrier.CheckpointID) {
	if id > c.lastSucceeded {
		c.lastSucceeded = id
		c.consecutive = 0
		clear(c.counted)
	}
}

func (c *core) sortedPending() []*pending {
	ps := slices.Collect(maps.Values(c.pending))
	slices.SortFunc(ps, func(a, b *pending) int { return cmp.Compare(a.id, b.id) })
	return ps
}

func (c *core) statsSnapshot(now time.Time) Stats {
	return c.stats.snapshot(len(c.pending), now)
}
