package weirtest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/barrier"
)

// InjectedError is the error an injected fault fails a task, a file
// operation or a connection with.
type InjectedError struct{ Fault Fault }

func (e *InjectedError) Error() string { return "weirtest: injected " + e.Fault.String() }

// opKind tells sources, operators and sinks apart.
type opKind = weir.OperatorKind

const (
	sourceOp = weir.SourceOperator
	sinkOp   = weir.SinkOperator
)

// drainCheckpoints is how many checkpoints complete, once every source of
// an attempt is exhausted and held, before the harness stops waiting for
// faults that have not fired: with aligned checkpoints the first one
// already proves every record was processed.
const drainCheckpoints = 3

// subtaskKey names an operator subtask.
type subtaskKey struct {
	op      string
	subtask int
}

// counters are an operator subtask's counts over the whole run.
type counters struct {
	records, snapshots, notifications atomic.Int64
}

// injector is the weir.TestHarness of one run: it counts what the run's
// operator subtasks, checkpoint storage and connections do, fires the
// plan's faults at their counts, and holds exhausted sources until every
// fault fired and the attempt checkpointed.
type injector struct {
	ctx    context.Context
	faults []Fault
	fired  []atomic.Bool
	// slowEnd is, per SlowConsumer fault that fired, the record count
	// at which its slow records end.
	slowEnd []atomic.Int64

	// byOp indexes the operator faults by subtask (read-only).
	byOp map[subtaskKey][]int
	// pace is, per source subtask, how many records it emits between two
	// pauses for a checkpoint (read-only; none: no pauses).
	pace map[subtaskKey]int64

	tcpBytes                      atomic.Int64
	commits                       atomic.Int64 // Commits of recorded two-phase-commit sinks
	creates, writes, syncs, opens atomic.Int64
	// firstFiles is the state files created before the first checkpoint's
	// metadata (0: none written yet).
	firstFiles atomic.Int64

	mu struct {
		sync.Mutex
		counts  map[subtaskKey]*counters
		profile map[subtaskKey]*subtaskProfile
		attempt *attemptState
		// restores counts the attempts that restored a checkpoint.
		restores int
		wake     chan struct{} // closed and replaced when holds may end
		gaveUp   bool          // released sources with faults unfired
	}
}

// attemptState is what the injector knows of the current attempt.
type attemptState struct {
	n           int
	sources     int // source subtasks deployed
	ended       int // of those, exhausted and held
	completions int // distinct checkpoints completed
	last        barrier.CheckpointID
	atAllEnded  int // completions when the last source ended (-1: not yet)
}

// newInjector returns the injector of a run under faults; with a profile
// of the fault-free run and paces > 0, sources pause after each 1/paces
// of their records until a checkpoint completes.
func newInjector(ctx context.Context, faults []Fault, base *profile, paces int) *injector {
	h := &injector{ctx: ctx, faults: faults, fired: make([]atomic.Bool, len(faults)),
		slowEnd: make([]atomic.Int64, len(faults)), byOp: map[subtaskKey][]int{}}
	for i, f := range faults {
		if f.Kind.operatorKind() {
			k := subtaskKey{f.Operator, f.Subtask}
			h.byOp[k] = append(h.byOp[k], i)
		}
	}
	if base != nil && paces > 0 {
		h.pace = map[subtaskKey]int64{}
		for _, s := range base.subtasks {
			if s.Kind == sourceOp && s.Records >= int64(paces) {
				h.pace[subtaskKey{s.Operator, s.Subtask}] = s.Records / int64(paces)
			}
		}
	}
	h.mu.counts = map[subtaskKey]*counters{}
	h.mu.profile = map[subtaskKey]*subtaskProfile{}
	h.mu.wake = make(chan struct{})
	return h
}

// Operator implements weir.TestHarness.
func (h *injector) Operator(info weir.OperatorInfo) weir.OperatorProbe {
	k := subtaskKey{info.UID, info.Subtask}
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.mu.attempt
	if a == nil || a.n != info.Attempt {
		a = &attemptState{n: info.Attempt, atAllEnded: -1}
		h.mu.attempt = a
		if info.Restored != 0 {
			h.mu.restores++
		}
		h.broadcastLocked()
	}
	if info.Kind == sourceOp && !info.Finished {
		a.sources++
	}
	c := h.mu.counts[k]
	if c == nil {
		c = new(counters)
		h.mu.counts[k] = c
		h.mu.profile[k] = &subtaskProfile{Operator: info.UID, Name: info.Name, Kind: info.Kind, Subtask: info.Subtask}
	}
	p := &probe{h: h, key: k, attempt: info.Attempt, c: c, faults: h.byOp[k], nextPause: never}
	p.nextRecord = p.nextRecordAt()
	if every := h.pace[k]; every > 0 {
		// Counted from the attempt's start: a restored attempt pauses
		// for a checkpoint of its own before it goes far.
		p.pace = every
		p.nextPause = c.records.Load() + every
	}
	return p
}

// broadcastLocked wakes every held source.
func (h *injector) broadcastLocked() {
	close(h.mu.wake)
	h.mu.wake = make(chan struct{})
}

// current reports whether attempt n is the current one: faults fire in it
// only, not in the tasks of a failed attempt that are still stopping.
func (h *injector) current(n int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.attempt != nil && h.mu.attempt.n == n
}

// fire marks fault i fired; it reports false if it already had.
func (h *injector) fire(i int) bool {
	if !h.fired[i].CompareAndSwap(false, true) {
		return false
	}
	h.mu.Lock()
	h.broadcastLocked()
	h.mu.Unlock()
	return true
}

// pending reports whether a fault that must fire has not.
func (h *injector) pending() bool {
	for i, f := range h.faults {
		if !f.Kind.conditional() && !h.fired[i].Load() {
			return true
		}
	}
	return false
}

// hold decides whether an exhausted source of attempt n waits.
func (h *injector) hold(n int, first bool) (bool, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.mu.attempt
	if a == nil || a.n != n {
		return false, nil // a stale attempt: let it end
	}
	if first {
		a.ended++
		if a.ended == a.sources {
			a.atAllEnded = a.completions
			h.broadcastLocked()
		}
	}
	if a.completions == 0 {
		return true, h.mu.wake
	}
	if !h.pending() {
		return false, nil
	}
	if a.atAllEnded >= 0 && a.completions >= a.atAllEnded+drainCheckpoints {
		h.mu.gaveUp = true
		return false, nil
	}
	return true, h.mu.wake
}

// pause holds a source that reached its next pause until the attempt
// completed a checkpoint since the previous pause (or its start): at
// least one checkpoint falls in each 1/paces of the input, and a source
// waits only if none did yet.
func (p *probe) pause() (bool, <-chan struct{}) {
	h := p.h
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.mu.attempt
	if a == nil || a.n != p.attempt {
		return false, nil
	}
	if a.completions > p.pausedAt {
		p.pausedAt = a.completions
		p.nextPause = p.c.records.Load() + p.pace
		return false, nil
	}
	return true, h.mu.wake
}

// completed notes that attempt n completed checkpoint id.
func (h *injector) completed(n int, id barrier.CheckpointID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a := h.mu.attempt; a != nil && a.n == n && id > a.last {
		a.last = id
		a.completions++
		h.broadcastLocked()
	}
}

// sleep waits d or until the run ends.
func (h *injector) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-h.ctx.Done():
	}
}

// profile returns what the run saw of its operator subtasks.
func (h *injector) profile() profile {
	h.mu.Lock()
	defer h.mu.Unlock()
	var p profile
	for k, s := range h.mu.profile {
		s.Records = h.mu.counts[k].records.Load()
		p.subtasks = append(p.subtasks, *s)
	}
	p.tcpBytes = h.tcpBytes.Load()
	p.commits = h.commits.Load() > 0
	p.files = h.firstFiles.Load()
	return p
}

// unfired returns the faults that did not fire, and whether they must
// have (not conditional).
func (h *injector) unfired() (must, may []Fault) {
	for i, f := range h.faults {
		if h.fired[i].Load() {
			continue
		}
		if f.Kind.conditional() {
			may = append(may, f)
		} else {
			must = append(must, f)
		}
	}
	return must, may
}

// probe is the weir.OperatorProbe of one operator subtask in one attempt;
// the runtime calls it from the subtask's task goroutine.
type probe struct {
	h       *injector
	key     subtaskKey
	attempt int
	c       *counters
	faults  []int // indexes into h.faults
	// nextRecord is the record count at which a record fault is due
	// (math.MaxInt64: none): the per-record path compares only.
	nextRecord int64
	ended      bool
	// A source pauses once its count reaches nextPause, until the attempt
	// completed more than pausedAt checkpoints; then the next pause is
	// pace records later.
	pace, nextPause int64
	pausedAt        int
}

const never = int64(^uint64(0) >> 1)

// nextRecordAt returns the count of the next record fault not fired yet.
func (p *probe) nextRecordAt() int64 {
	next := never
	for _, i := range p.faults {
		f := p.h.faults[i]
		if p.h.fired[i].Load() {
			if n := p.c.records.Load(); f.Kind == SlowConsumer && n < p.h.slowEnd[i].Load() {
				next = min(next, n+1)
			}
			continue
		}
		if f.Kind == TaskFailure || f.Kind == SlowConsumer {
			next = min(next, f.At)
		}
	}
	return next
}

func (p *probe) Record() error {
	n := p.c.records.Add(1)
	if n < p.nextRecord {
		return nil
	}
	return p.recordSlow(n)
}

func (p *probe) recordSlow(n int64) error {
	defer func() { p.nextRecord = p.nextRecordAt() }()
	if !p.h.current(p.attempt) {
		return nil
	}
	for _, i := range p.faults {
		f := p.h.faults[i]
		switch {
		case f.Kind == SlowConsumer && n >= f.At:
			if !p.h.fired[i].Load() {
				// The slow records start here, where the fault fires
				// (later than At if the records at At went to a failed
				// attempt).
				p.h.slowEnd[i].Store(n + slowRecords)
				p.h.fire(i)
			}
			if n < p.h.slowEnd[i].Load() {
				p.h.sleep(f.Delay)
			}
		case f.Kind == TaskFailure && n >= f.At && p.h.fire(i):
			return &InjectedError{f}
		}
	}
	return nil
}

// event counts one snapshot or notification and fires a fault of kind
// due at that count.
func (p *probe) event(ctr *atomic.Int64, kind FaultKind) error {
	n := ctr.Add(1)
	if !p.h.current(p.attempt) {
		return nil
	}
	for _, i := range p.faults {
		if f := p.h.faults[i]; f.Kind == kind && n >= f.At && p.h.fire(i) {
			return &InjectedError{f}
		}
	}
	return nil
}

func (p *probe) Snapshot(barrier.CheckpointID) error {
	return p.event(&p.c.snapshots, SnapshotFailure)
}

func (p *probe) CheckpointComplete(id barrier.CheckpointID) error {
	p.h.completed(p.attempt, id)
	return p.event(&p.c.notifications, CommitFailure)
}

func (p *probe) Hold(ended bool) (bool, <-chan struct{}) {
	if !ended {
		if p.c.records.Load() < p.nextPause {
			return false, nil
		}
		return p.pause()
	}
	first := !p.ended
	p.ended = true
	return p.h.hold(p.attempt, first)
}

// Dial implements weir.TestHarness: it counts the bytes of the job's TCP
// connections and resets one at a ConnReset fault's count.
func (h *injector) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &faultConn{Conn: c, h: h}, nil
}

// faultConn is a connection of the job's exchanges under the injector.
type faultConn struct {
	net.Conn
	h *injector
}

// count adds n bytes and reports the ConnReset fault due, if any.
func (c *faultConn) count(n int) error {
	if n <= 0 {
		return nil
	}
	total := c.h.tcpBytes.Add(int64(n))
	for i, f := range c.h.faults {
		if f.Kind == ConnReset && total >= f.At && c.h.fire(i) {
			if tc, ok := c.Conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // close with a reset
			}
			_ = c.Conn.Close()
			return &InjectedError{f}
		}
	}
	return nil
}

func (c *faultConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if ferr := c.count(n); ferr != nil {
		return 0, ferr
	}
	return n, err
}

func (c *faultConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if ferr := c.count(n); ferr != nil {
		return 0, ferr
	}
	return n, err
}

var _ weir.TestHarness = (*injector)(nil)

// describe lists faults, one a line.
func describe(fs []Fault) string {
	s := ""
	for _, f := range fs {
		s += fmt.Sprintf("\n\t%v", f)
	}
	return s
}

// committed counts a Commit of a recorded two-phase-commit sink and
// returns the CommitAckFailure fault due, if any.
func (h *injector) committed() error {
	n := h.commits.Add(1)
	for i, f := range h.faults {
		if f.Kind == CommitAckFailure && n >= f.At && h.fire(i) {
			return &InjectedError{f}
		}
	}
	return nil
}
