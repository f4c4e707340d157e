package task

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/network/debloat"
	"github.com/weirstream/weir/state"
)

// DefaultBufferTimeout bounds how long a partially filled output buffer
// waits before it is flushed (Flink's execution.buffer-timeout).
const DefaultBufferTimeout = 100 * time.Millisecond

// sourceBatch is how many source polls run between two mailbox checks.
const sourceBatch = 64

// State is a task's lifecycle state.
type State int32

const (
	Created State = iota
	Running
	Finished
	Failed
	Canceled
)

func (s State) String() string {
	return [...]string{"created", "running", "finished", "failed", "canceled"}[s]
}

// Config describes one task: one parallel instance of a chain of operators.
// Exactly one of Source and Gate is set.
type Config struct {
	Key         state.TaskKey // vertex and subtask index
	Name        string        // e.g. "map -> filter (2/4)"
	Parallelism int
	Logger      *zap.Logger

	// Source is the chain head of a source task.
	Source Source
	// Gate and Input are the input of a non-source task with one input
	// edge: buffers from the gate are deserialized and handed to Input
	// record by record.
	Gate  *network.InputGate
	Input RecordProcessor
	// Inputs, instead of Input, split the gate's channels among the
	// head's input edges, in order: the first Inputs[0].Channels channels
	// are Inputs[0]'s, and so on. A task with several inputs (a two-input
	// operator, a union) reads all of them through the one gate and one
	// barrier handler.
	Inputs []Input
	// Operators is the whole chain, head first, for lifecycle and hooks.
	Operators []Operator
	// Current, when set, is the chain's mark of the operator running, which
	// names the operator of a panic the task recovers.
	Current *CurrentOperator
	// Outputs are the partitions the chain's tail writes.
	Outputs []*network.ResultPartition

	// BufferTimeout: partially filled output buffers are flushed at least
	// this often (0 means the writers flush after every record; negative
	// is invalid). Default DefaultBufferTimeout when zero and
	// FlushAlways is false.
	BufferTimeout time.Duration
	FlushAlways   bool
	// MaxRecordSize bounds one incoming record (0 = network default).
	MaxRecordSize int

	// MaxParallelism is the number of key groups (default 128).
	MaxParallelism int
	// NewKeyedBackend creates the keyed state backend of a keyed operator
	// for subtask index of parallelism; required when an operator is
	// keyed (the root package decides the default backend).
	NewKeyedBackend func(maxParallelism, parallelism, index int) (state.KeyedBackend, error)
	// Restore, when set, starts the task from a checkpoint.
	Restore *RestoreConfig

	// Checkpointing, nil when off.
	Checkpoint *CheckpointConfig

	// Debloat turns buffer debloating on for the task's input gate (nil:
	// off): its channels' producers cut their buffers so that the data in
	// flight drains in the target time. MaxSize defaults to the segment
	// size.
	Debloat *debloat.Config
}

// Input is one input edge of a task's chain head: Channels consecutive
// channels of the task's gate, whose records Processor decodes and hands
// to the head's input Index (0, 1, … for a two-input operator; several
// edges of a union feed the same Index). Each input index has its own
// watermark valve, and the head's event time is the minimum over its
// inputs (eventtime.CombinedValve); an input ends when all its channels
// did (EndInputOperator).
type Input struct {
	Index     int
	Channels  int
	Processor RecordProcessor
}

// Metrics are a task's counters, valid once Run returned.
type Metrics struct {
	Name          string
	RecordsIn     int64
	RecordsOut    int64
	BytesIn       int64
	BytesOut      int64
	Busy          time.Duration
	Idle          time.Duration
	BackPressured time.Duration
}

// Task runs one chain instance in one goroutine: its mailbox loop pulls the
// source (or polls the input gate), pushes records through the chain and,
// between batches, runs mails — checkpoint triggers and notifications —
// so checkpointing never races with record processing.
type Task struct {
	cfg  Config
	log  *zap.Logger
	mail mailbox

	deser         []*network.Deserializer
	timer         *time.Timer
	flushDeadline time.Time

	metrics    Metrics
	finishedCh int                      // channels that delivered end of partition
	valve      *eventtime.CombinedValve // combines the inputs' watermarks (tasks with a gate)
	chans      []inputChannel           // per gate channel: its input and record processor
	inputsLeft []int                    // per input index: channels that did not end yet
	out        outputTime               // watermark and status forwarded to the outputs
	proc       procTimers               // processing-time callbacks requested by operators
	ckptNext   int64                    // the checkpointer's next timer (unix ms), noTime if none
	debloat    *debloating              // nil: off
	inputEnded bool
	fin        finalState
	ckpt       *checkpointer
	asyncWG    sync.WaitGroup
	states     []opState
	runCtx     context.Context
	parentCtx  context.Context // Run's: canceled with the task, not at its end
	lv         liveState       // what LiveMetrics reads

	// blocked counts the operators that block the input (BlockInput);
	// resumeCh is the channel whose buffer one of them stopped the task
	// in (-1: none).
	blocked  int
	blocking []bool
	resumeCh int

	mu struct {
		sync.Mutex
		state State
	}
}

// New validates cfg and returns a task; it starts nothing.
func New(cfg Config) (*Task, error) {
	if (cfg.Source == nil) == (cfg.Gate == nil) {
		return nil, fmt.Errorf("task %s: exactly one of source and input gate must be set", cfg.Name)
	}
	if cfg.Gate != nil && (cfg.Input == nil) == (len(cfg.Inputs) == 0) {
		return nil, fmt.Errorf("task %s: an input gate needs exactly one of a record processor and inputs", cfg.Name)
	}
	if cfg.BufferTimeout < 0 {
		return nil, fmt.Errorf("task %s: negative buffer timeout %v", cfg.Name, cfg.BufferTimeout)
	}
	if cfg.BufferTimeout == 0 && !cfg.FlushAlways {
		cfg.BufferTimeout = DefaultBufferTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.MaxParallelism == 0 {
		cfg.MaxParallelism = keygroup.DefaultMaxParallelism
	}
	if cfg.Parallelism == 0 {
		cfg.Parallelism = 1
	}
	if err := keygroup.Validate(cfg.MaxParallelism, cfg.Parallelism); err != nil {
		return nil, fmt.Errorf("task %s: %w", cfg.Name, err)
	}
	if cfg.NewKeyedBackend == nil {
		for _, op := range cfg.Operators {
			if op.Keyed() {
				return nil, fmt.Errorf("task %s: keyed operator %s without a keyed state backend (NewKeyedBackend)", cfg.Name, op.Name())
			}
		}
	}
	t := &Task{cfg: cfg, log: cfg.Logger.With(zap.String("task", cfg.Name)), mail: newMailbox()}
	t.metrics.Name = cfg.Name
	t.out = outputTime{watermark: eventtime.MinWatermark}
	t.proc = newProcTimers(len(cfg.Operators))
	t.blocking, t.resumeCh = make([]bool, len(cfg.Operators)), -1
	t.initLive()
	t.ckptNext = noTime
	if cfg.Gate != nil {
		if err := t.initInputs(); err != nil {
			return nil, fmt.Errorf("task %s: %w", cfg.Name, err)
		}
		t.deser = make([]*network.Deserializer, cfg.Gate.NumChannels())
		for i := range t.deser {
			t.deser[i] = network.NewDeserializer(cfg.Gate.Channel(i).Name(), cfg.MaxRecordSize)
			if t.chans[i].pf != nil {
				t.chans[i].recs = t.deser[i].Records
			}
		}
	}
	if cfg.Debloat != nil && cfg.Gate != nil {
		d, err := debloat.New(*cfg.Debloat)
		if err != nil {
			return nil, fmt.Errorf("task %s: %w", cfg.Name, err)
		}
		t.debloat = &debloating{d: d, every: cfg.Debloat.WithDefaults().Period}
	}
	if cfg.Checkpoint != nil {
		c, err := newCheckpointer(t, cfg.Checkpoint)
		if err != nil {
			return nil, err
		}
		t.ckpt = c
	}
	return t, nil
}

// IsSource reports whether the task's chain starts with a source.
func (t *Task) IsSource() bool { return t.cfg.Source != nil }

// Name is the task's name.
func (t *Task) Name() string { return t.cfg.Name }

// Key is the task's vertex and subtask.
func (t *Task) Key() state.TaskKey { return t.cfg.Key }

// State is the task's lifecycle state.
func (t *Task) State() State {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.state
}

func (t *Task) setState(s State) {
	t.mu.Lock()
	t.mu.state = s
	t.mu.Unlock()
	t.setLiveState(s)
}

// Metrics returns the task's counters; call after Run returned.
func (t *Task) Metrics() Metrics { return t.metrics }

// ErrMailboxClosed is returned by Post once the task stopped taking mails:
// it returned from Run, or is cleaning up.
var ErrMailboxClosed = errors.New("task: mailbox closed")

// Post queues m to run in the task's goroutine between records. It does
// not block. A mail posted before Run starts runs once the task is open
// (its state restored). Post fails with ErrMailboxClosed once the task
// stopped; a mail it accepted either runs or, if the task stops first,
// is dropped (see postMail).
func (t *Task) Post(m func() error) error {
	return t.mail.put(mail{run: m})
}

// postMail is Post with a drop handler: if the task stops before m ran,
// m.drop is called (from the goroutine that stops the mailbox) with the
// reason, so that nothing waits for a mail that will never run.
func (t *Task) postMail(m mail) error { return t.mail.put(m) }

// mail is one unit of work for the task's goroutine.
type mail struct {
	run func() error
	// drop, if set, is called instead of run when the task stops first;
	// finished tells whether the task finished (rather than failed or
	// was canceled).
	drop func(finished bool)
}

// mailbox is the task's queue of mails (Flink's TaskMailbox): unbounded,
// as mails are few (checkpoint triggers and notifications), and cheap to
// check between records: one atomic load when empty. Closing it is
// atomic with respect to put: a mail is either refused or seen by close.
type mailbox struct {
	n      atomic.Int32
	signal chan struct{} // buffered(1): a mail was put
	mu     struct {
		sync.Mutex
		q      []mail
		closed bool
	}
}

func newMailbox() mailbox { return mailbox{signal: make(chan struct{}, 1)} }

func (b *mailbox) put(m mail) error {
	b.mu.Lock()
	if b.mu.closed {
		b.mu.Unlock()
		return ErrMailboxClosed
	}
	b.mu.q = append(b.mu.q, m)
	b.n.Add(1)
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
	return nil
}

// take returns the oldest mail; ok is false when there is none.
func (b *mailbox) take() (m mail, ok bool) {
	if b.n.Load() == 0 {
		return mail{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.mu.q) == 0 {
		return mail{}, false
	}
	m = b.mu.q[0]
	b.mu.q[0] = mail{}
	b.mu.q = b.mu.q[1:]
	b.n.Add(-1)
	return m, true
}

// close refuses further mails and returns those that never ran.
func (b *mailbox) close() []mail {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.closed = true
	q := b.mu.q
	b.mu.q = nil
	b.n.Store(0)
	return q
}

// Error is a task failure: it names the task and, when known, the operator.
type Error struct {
	Task     string
	Operator string
	Err      error
}

func (e *Error) Error() string {
	if e.Operator != "" {
		return fmt.Sprintf("task %s: operator %s: %v", e.Task, e.Operator, e.Err)
	}
	return fmt.Sprintf("task %s: %v", e.Task, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// PanicError is a panic in user code, recovered and turned into a failure.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Run runs the task until its input ends (nil), it fails, or ctx is done.
// On any outcome every operator is closed, the gate and (on failure) the
// outputs are released, and asynchronous snapshot work has stopped.
func (t *Task) Run(ctx context.Context) (err error) {
	start := time.Now()
	t.parentCtx = ctx
	ctx, cancel := context.WithCancel(ctx)
	t.runCtx = ctx
	t.setState(Running)
	defer func() {
		if r := recover(); r != nil {
			err = &Error{Task: t.cfg.Name, Operator: t.cfg.Current.Name(), Err: &PanicError{Value: r, Stack: debug.Stack()}}
		}
		if err == nil {
			// A finished task completes the snapshots it started.
			t.asyncWG.Wait()
		}
		cancel()
		t.asyncWG.Wait()
		err = t.cleanup(err)
		total := time.Since(start)
		t.collectMetrics(total)
		t.publishFinal(total)
		switch {
		case err == nil:
			t.setState(Finished)
			if t.ckpt != nil {
				t.ckpt.cfg.Responder.Finished(t.cfg.Key)
			}
		case canceledBy(t.parentCtx, err):
			t.setState(Canceled)
		default:
			t.setState(Failed)
		}
	}()
	for _, p := range t.cfg.Outputs {
		p.SetContext(ctx)
	}
	if t.restoredFinished() {
		return t.runFinished(ctx)
	}
	if err := t.open(); err != nil {
		return err
	}
	t.startLive(start)
	if t.cfg.Gate != nil {
		if err := t.cfg.Gate.Start(); err != nil {
			return &Error{Task: t.cfg.Name, Err: err}
		}
	}
	if err := t.restoreChannelState(); err != nil {
		return err
	}
	t.timer = time.NewTimer(time.Hour)
	t.timer.Stop()
	defer t.timer.Stop()
	t.armFlush()
	t.startDebloating(time.Now())
	if t.ckpt != nil {
		// Open and restored: checkpoints may start.
		t.ckpt.cfg.Responder.Running(t.cfg.Key)
	}
	if t.cfg.Source != nil {
		err = t.runSource(ctx)
	} else {
		err = t.runInput(ctx)
	}
	if err != nil {
		return err
	}
	return t.finish(ctx)
}

// canceledBy reports whether err, a task's outcome, is its cancellation:
// parent (Run's context) ended, and err is what its end made the task
// return (its Err or its cause). An error that wraps context.Canceled
// while parent is live is the task's own failure (a user function's call
// that gave up), not a cancellation.
func canceledBy(parent context.Context, err error) bool {
	if parent.Err() == nil {
		return false
	}
	return errors.Is(err, parent.Err()) || errors.Is(err, context.Cause(parent))
}

func (t *Task) open() error {
	if err := t.initStates(); err != nil {
		return err
	}
	rng := keygroup.RangeFor(t.cfg.MaxParallelism, t.cfg.Parallelism, t.cfg.Key.Subtask)
	for i, op := range t.cfg.Operators {
		oc := &OperatorContext{TaskName: t.cfg.Name, Subtask: t.cfg.Key.Subtask, Parallelism: t.cfg.Parallelism,
			MaxParallelism: t.cfg.MaxParallelism, KeyGroups: rng,
			Keyed: t.states[i].keyed, OperatorState: t.states[i].operator, t: t, index: i,
			Logger: t.log, ExactlyOnce: t.ckpt != nil && t.ckpt.cfg.Mode == barrier.ExactlyOnce, Checkpointing: t.ckpt != nil,
			Context: t.parentCtx}
		if r := t.cfg.Restore; r != nil {
			oc.Restored, oc.RestoredID = true, r.ID
		}
		if err := op.Open(oc); err != nil {
			return &Error{Task: t.cfg.Name, Operator: op.Name(), Err: fmt.Errorf("open: %w", err)}
		}
	}
	return nil
}

// finish ends a task whose input ended: a trigger that waited for the end
// of the input is taken, operators flush, the task waits for a final
// checkpoint if an operator wants one, outputs get end of partition.
func (t *Task) finish(ctx context.Context) error {
	if b := t.fin.deferred; b != nil {
		t.fin.deferred = nil
		if err := t.performCheckpoint(*b, 0); err != nil {
			return err
		}
	}
	for _, op := range t.cfg.Operators {
		if err := op.Finish(); err != nil {
			return &Error{Task: t.cfg.Name, Operator: op.Name(), Err: fmt.Errorf("finish: %w", err)}
		}
	}
	if t.needsFinalCheckpoint() {
		if err := t.awaitFinalCheckpoint(ctx); err != nil {
			return err
		}
	}
	eop := endOfPartitionPayload()
	for _, p := range t.cfg.Outputs {
		p.Finish(eop)
	}
	return nil
}

func (t *Task) cleanup(err error) error {
	for i := len(t.cfg.Operators) - 1; i >= 0; i-- {
		op := t.cfg.Operators[i]
		if cerr := op.Close(); cerr != nil && err == nil {
			err = &Error{Task: t.cfg.Name, Operator: op.Name(), Err: fmt.Errorf("close: %w", cerr)}
		}
	}
	for _, d := range t.deser {
		d.Close()
	}
	if t.cfg.Gate != nil {
		t.cfg.Gate.Close()
	}
	for _, p := range t.cfg.Outputs {
		if err != nil {
			p.Release()
		} else {
			p.ReleaseProducer()
		}
	}
	if t.ckpt != nil {
		t.ckpt.close()
	}
	if cerr := t.closeStates(); cerr != nil {
		if err == nil {
			err = cerr
		} else {
			// The task failed already; its keyed state's close failing
			// too is logged, not lost.
			t.log.Warn("closing keyed state after a failure", zap.Error(cerr))
		}
	}
	// Mails that arrived too late: whoever waits for them hears why.
	for _, m := range t.mail.close() {
		if m.drop != nil {
			m.drop(err == nil)
		}
	}
	return err
}

func (t *Task) collectMetrics(total time.Duration) {
	for _, p := range t.cfg.Outputs {
		s := p.Stats()
		t.metrics.RecordsOut += s.Records
		t.metrics.BytesOut += s.Bytes
		t.metrics.BackPressured += s.BackPressured
	}
	t.metrics.Busy = max(0, total-t.metrics.Idle-t.metrics.BackPressured)
}

// runMails runs every queued mail.
func (t *Task) runMails() error {
	for m, ok := t.mail.take(); ok; m, ok = t.mail.take() {
		if err := m.run(); err != nil {
			return err
		}
	}
	return nil
}

// armFlush sets the next flush deadline.
func (t *Task) armFlush() {
	if t.cfg.FlushAlways || len(t.cfg.Outputs) == 0 {
		return
	}
	t.flushDeadline = time.Now().Add(t.cfg.BufferTimeout)
}

// maybeFlush flushes the outputs if the buffer timeout passed.
func (t *Task) maybeFlush(now time.Time) {
	if t.flushDeadline.IsZero() || now.Before(t.flushDeadline) {
		return
	}
	t.flushOutputs()
	t.flushDeadline = now.Add(t.cfg.BufferTimeout)
}

func (t *Task) flushOutputs() {
	for _, p := range t.cfg.Outputs {
		p.Flush()
	}
}

// wait blocks until ready fires, a mail arrives, the flush deadline passes
// or ctx is done, and counts the time as idle (or back-pressured when
// waiting for output buffers).
func (t *Task) wait(ctx context.Context, ready <-chan struct{}, backPressure bool) error {
	return t.waitEither(ctx, ready, nil, backPressure)
}

// waitEither is wait for either of two channels (one may be nil).
func (t *Task) waitEither(ctx context.Context, ready, ready2 <-chan struct{}, backPressure bool) error {
	start := time.Now()
	t.publish(start, waitKindOf(backPressure))
	var timerC <-chan time.Time
	if deadline := t.nextDeadline(); !deadline.IsZero() {
		t.timer.Reset(max(deadline.Sub(start), 0))
		timerC = t.timer.C
	}
	var err error
	select {
	case <-ready:
	case <-ready2:
	case <-t.mail.signal:
		err = t.runMails()
	case <-timerC:
		timerC = nil
	case <-ctx.Done():
		err = ctx.Err()
	}
	if timerC != nil && !t.timer.Stop() {
		select {
		case <-t.timer.C:
		default:
		}
	}
	now := time.Now()
	if backPressure {
		t.metrics.BackPressured += now.Sub(start)
	} else {
		t.metrics.Idle += now.Sub(start)
	}
	t.publish(now, notWaiting)
	if err != nil {
		return err
	}
	return t.tick(now)
}

// nextDeadline is when the task must wake up by itself: the earlier of the
// flush deadline and the next processing-time callback (zero: none).
func (t *Task) nextDeadline() time.Time {
	d := t.flushDeadline
	if next := min(t.proc.next, t.ckptNext); next != noTime {
		p := time.UnixMilli(next)
		if d.IsZero() || p.Before(d) {
			d = p
		}
	}
	return d
}

// tick does what is due at now: flushing outputs and processing-time
// callbacks. The loops call it once per buffer or source batch.
func (t *Task) tick(now time.Time) error {
	t.maybeFlush(now)
	t.maybePublish(now)
	if t.proc.next != noTime && now.UnixMilli() >= t.proc.next {
		if err := t.fireProcessingTime(now.UnixMilli()); err != nil {
			return err
		}
	}
	if t.debloat != nil && !now.Before(t.debloat.next) {
		t.sampleDebloat(now)
	}
	if t.ckptNext != noTime && now.UnixMilli() >= t.ckptNext {
		return t.ckpt.fireTimers(now.UnixMilli())
	}
	return nil
}

// outputsBlocked returns a channel to wait on when some output has no free
// buffer, or nil.
func (t *Task) outputsBlocked() <-chan struct{} {
	for _, p := range t.cfg.Outputs {
		if ch := p.Available(); ch != nil {
			return ch
		}
	}
	return nil
}

func (t *Task) runSource(ctx context.Context) error {
	src := t.cfg.Source
	for {
		if err := t.runMails(); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if t.blocked > 0 {
			if err := t.waitUnblocked(ctx); err != nil {
				return err
			}
			continue
		}
		if ch := t.outputsBlocked(); ch != nil {
			if err := t.wait(ctx, ch, true); err != nil {
				return err
			}
			continue
		}
		for i := 0; i < sourceBatch && t.blocked == 0; i++ {
			st, err := src.PollNext()
			if err != nil {
				return t.wrapErr(err)
			}
			switch st {
			case MoreAvailable:
				continue
			case NothingAvailable:
				if err := t.wait(ctx, src.Available(), false); err != nil {
					return err
				}
			case EndOfInput:
				if err := t.runMails(); err != nil {
					return err
				}
				// Every event-time window and timer downstream fires.
				return t.emitWatermarkFrom(0, eventtime.MaxWatermark)
			}
			break
		}
		t.cfg.Current.Set(nil)
		if err := t.tick(time.Now()); err != nil {
			return err
		}
	}
}

func (t *Task) wrapErr(err error) error {
	var te *Error
	if errors.As(err, &te) {
		if te.Task == "" {
			te.Task = t.cfg.Name
		}
		return err
	}
	return &Error{Task: t.cfg.Name, Err: err}
}

func (t *Task) runInput(ctx context.Context) error {
	gate := t.cfg.Gate
	for !t.inputEnded {
		if err := t.runMails(); err != nil {
			return err
		}
		if t.blocked > 0 {
			if err := t.waitUnblocked(ctx); err != nil {
				return err
			}
			continue
		}
		if t.overdrawn() {
			if err := t.waitForOutputs(ctx); err != nil {
				return err
			}
			continue
		}
		if ch := t.resumeCh; ch >= 0 {
			// The rest of a buffer an operator stopped the task in.
			t.resumeCh = -1
			if err := t.consume(ch); err != nil {
				return err
			}
			continue
		}
		ch, b, err := gate.PollNext()
		if err != nil {
			return t.wrapErr(err)
		}
		if b == nil {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := t.wait(ctx, gate.Ready(), false); err != nil {
				return err
			}
			continue
		}
		if !b.IsData() {
			err := t.handleEvent(ch, b)
			b.Release()
			if err != nil {
				return err
			}
			continue
		}
		t.metrics.BytesIn += int64(b.Len())
		t.deser[ch].SetBuffer(b)
		if c := &t.chans[ch]; c.pf != nil {
			if err := c.pf.Prefetch(c.recs); err != nil {
				return t.wrapErr(err)
			}
		}
		if err := t.consume(ch); err != nil {
			return err
		}
	}
	return t.runMails()
}

// consume hands the records of channel ch's current buffer to the chain,
// until the buffer is used up or an operator blocks the input (BlockInput):
// the rest of the buffer then waits in the channel's deserializer
// (resumeCh), and an unaligned checkpoint taken meanwhile persists it as
// the channel's in-flight data.
func (t *Task) consume(ch int) error {
	gate := t.cfg.Gate
	d, in := t.deser[ch], t.chans[ch].proc
	n := int64(0)
	for {
		if t.blocked > 0 {
			t.resumeCh = ch
			break
		}
		// The deserializer's fast path, inlined here; Next for the rest.
		rec, ok := d.TryNext()
		if !ok {
			var err error
			if rec, ok, err = d.Next(); err != nil {
				t.metrics.RecordsIn += n
				return t.wrapErr(err)
			}
			if !ok {
				break
			}
		}
		n++
		if err := in.ProcessRecord(rec); err != nil {
			t.metrics.RecordsIn += n
			return t.wrapErr(err)
		}
		if n&63 == 0 && (gate.PriorityPending() || t.ckptNext != noTime) {
			// A long buffer (a slow operator) does not hold up an
			// unaligned barrier or an alignment timeout.
			if err := t.midBuffer(); err != nil {
				t.metrics.RecordsIn += n
				return err
			}
		}
	}
	t.metrics.RecordsIn += n
	t.cfg.Current.Set(nil)
	return t.tick(time.Now())
}

// handleEvent handles one event buffer from channel ch.
func (t *Task) handleEvent(ch int, b *buffer.Buffer) error {
	ev, err := decodeEvent(b.Bytes())
	if err != nil {
		return &Error{Task: t.cfg.Name, Err: fmt.Errorf("channel %s: %w", t.cfg.Gate.Channel(ch).Name(), err)}
	}
	switch ev.kind {
	case evEndOfPartition:
		if t.deser[ch].Pending() {
			return &Error{Task: t.cfg.Name, Err: fmt.Errorf("channel %s: end of partition inside a record", t.cfg.Gate.Channel(ch).Name())}
		}
		t.finishedCh++
		if err := t.channelEnded(ch); err != nil {
			return err
		}
		if t.ckpt != nil {
			// The channel's in-flight data ends here.
			for id := range t.ckpt.states {
				t.ckpt.channel(barrier.ChannelIndex(ch)).StopPersisting(id)
			}
			t.ckpt.handler.ProcessEndOfPartition(barrier.ChannelIndex(ch))
			if err := t.ckpt.err(); err != nil {
				return err
			}
		}
		t.cfg.Gate.Channel(ch).Release()
		if t.finishedCh == t.cfg.Gate.NumChannels() {
			t.inputEnded = true
		}
	case evBarrier:
		if t.ckpt == nil {
			// Checkpointing is off here but a producer sent a barrier:
			// nothing to align, keep consuming.
			t.cfg.Gate.Resume(ch)
			return nil
		}
		if b.Type() == buffer.PriorityEvent {
			return t.ckpt.onPriorityBarrier(ch, ev.barrier)
		}
		return t.ckpt.onBarrier(ch, ev.barrier)
	case evAnnouncement:
		if t.ckpt != nil {
			return t.ckpt.onAnnouncement(ch, ev.barrier)
		}
	case evCancel:
		if t.ckpt != nil {
			t.ckpt.handler.ProcessCancel(barrier.ChannelIndex(ch), ev.cancelID)
			return t.ckpt.err()
		}
	case evWatermark:
		c := t.chans[ch]
		return t.applyEmission(t.valve.ProcessWatermark(c.input, c.local, ev.watermark))
	case evWatermarkStatus:
		c := t.chans[ch]
		return t.applyEmission(t.valve.ProcessStatus(c.input, c.local, ev.status))
	case evEndOfData:
	}
	return nil
}
