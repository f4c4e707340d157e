package weir

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/task"
)

// SplitReader reads one subtask's share of a source made of splits:
// Kafka partitions, shards, files — each an ordered sequence of records
// with event timestamps of its own. Read it with FromSplitReader, which
// generates watermarks per split and combines them for the subtask
// (Flink's per-split watermarks), so that a partition that is behind holds
// back event time and an empty one does not stall it.
//
// Like a PollingReader it never blocks: Poll says NothingAvailable and
// Available tells when to poll again. It may also implement
// PositionedReader, RescalableReader, PositionCommitter and io.Closer.
type SplitReader[T any] interface {
	// Start is called once before the first Poll (after Seek or Rescale
	// when the job restores), with the splits register, to which the
	// reader adds the splits it reads: those it has now, and later the
	// ones it discovers. It removes a split once it read it to its end.
	// Start may block to look up what to read (it runs while the task
	// opens).
	Start(splits *Splits) error
	// Poll returns the next record (Read) with the split it came from,
	// NothingAvailable, or EndOfInput. It must not block. The record's
	// split must have been added and not removed yet.
	Poll() (SplitRecord[T], ReadStatus, error)
	// Available returns a channel that becomes ready once Poll may return
	// a record again (or the splits changed). It is called after Poll
	// returned NothingAvailable.
	Available() <-chan struct{}
}

// SplitRecord is one record a SplitReader read: its value, the split it
// belongs to and its timestamp there (unix ms; eventtime.NoTimestamp if
// the split has none), such as a Kafka record's timestamp.
type SplitRecord[T any] struct {
	Value     T
	Split     string
	Timestamp int64
}

// PositionCommitter is an optional interface of a PositionedReader of
// FromSplitReader: once a checkpoint completed, CommitPosition receives
// the position the reader had in it, to acknowledge it upstream (a Kafka
// source commits its offsets to a consumer group, for monitoring). It
// runs in the task's goroutine, so it must not block; an error fails the
// task.
type PositionCommitter interface {
	CommitPosition(pos []byte) error
}

// Splits is the register of a SplitReader's splits; each gets its own
// watermark generator. Use it only from the task's goroutine: in Start and
// Poll.
type Splits struct {
	add, remove func(id string) error // the typed source operator's
	backlog     func(id string, backlog bool)
	err         error
}

// Add registers split id: its records may follow, and the subtask's
// watermark waits for it until it emits watermarks or turns idle. Adding a
// split twice is an error.
func (s *Splits) Add(id string) {
	if s.err == nil {
		s.err = s.add(id)
	}
}

// Remove unregisters split id (read to its end): its watermark no longer
// counts. Removing a split that is not registered is an error.
func (s *Splits) Remove(id string) {
	if s.err == nil {
		s.err = s.remove(id)
	}
}

// SetBacklog tells whether split id has records waiting to be read (read
// from the broker but not returned by Poll yet, or known to be there):
// while it has, the split's idleness timeout does not run, so a split
// that is merely waiting its turn behind other splits, or behind a slow
// operator, never turns idle and its records are not late. A split starts
// without backlog. Unknown splits are ignored.
func (s *Splits) SetBacklog(id string, backlog bool) {
	if s.backlog != nil {
		s.backlog(id, backlog)
	}
}

// FromSplitReader returns a timestamped stream read by one SplitReader
// per subtask; newReader is called once per subtask (and again after every
// restart). Every record's event timestamp is strategy's timestamp
// function applied to its value or, when the strategy has none (e.g.
// BoundedOutOfOrderness(bound, nil)), the reader's timestamp. Each split
// gets its own generator from strategy (with its idleness, so an empty
// split turns idle); the subtask's watermark is the minimum over its
// active splits, and the subtask is idle when all of its splits are, or it
// has none. Use NoWatermarks for timestamps without watermarks. name may
// change between a savepoint and its restore (the source's kind is "split
// source").
func FromSplitReader[T any](env *Environment, name string, strategy *WatermarkStrategy[T], newReader func(subtask, parallelism int) (SplitReader[T], error)) *Stream[T] {
	switch {
	case strategy == nil:
		env.fail(fmt.Errorf("weir: source %s: nil watermark strategy", name))
	case strategy.err != nil:
		env.fail(fmt.Errorf("weir: source %s: %w", name, strategy.err))
	}
	interval := env.cfg.watermarkInterval.Milliseconds()
	n := env.addNode(&graph.Node{Name: name, Kind: kindSplitSource, Source: true})
	n.Instantiate = func(rc *graph.Subtask, out any) (any, task.Operator, error) {
		next, _ := out.(collector[T])
		if next == nil {
			next = discard[T]{}
		}
		r, err := newReader(rc.Index, rc.Parallelism)
		if err != nil {
			return nil, nil, fmt.Errorf("weir: source %s subtask %d: %w", name, rc.Index, err)
		}
		o := &splitSourceOp[T]{
			sourceOp: sourceOp[T]{opBase: base(rc), r: &splitPoller[T]{r: r}, next: next, subtask: rc.Index, parallelism: rc.Parallelism},
			sr:       r, strategy: strategy, interval: interval, index: map[string]int{},
		}
		return o, o, nil
	}
	s := newStream[T](env, n)
	s.timestamped = true
	return s
}

// NoWatermarks is the strategy of a stream with event timestamps but no
// watermarks (Flink's WatermarkStrategy.noWatermarks): event-time windows
// then fire only at the end of the input. timestamp may be nil in
// FromSplitReader (the reader's timestamps).
func NoWatermarks[T any](timestamp func(v T) int64) *WatermarkStrategy[T] {
	return &WatermarkStrategy[T]{timestamp: timestamp,
		newGenerator: func() (eventtime.Generator, error) { return noWatermarks{}, nil }}
}

type noWatermarks struct{}

func (noWatermarks) OnEvent(int64, eventtime.Output) {}
func (noWatermarks) OnPeriodicEmit(eventtime.Output) {}

// splitPoller lets sourceOp find the SplitReader's optional interfaces;
// splitSourceOp polls the reader itself.
type splitPoller[T any] struct{ r SplitReader[T] }

func (p *splitPoller[T]) Poll() (T, ReadStatus, error) {
	panic("weir: splitPoller.Poll is never called")
}
func (p *splitPoller[T]) Available() <-chan struct{} { return p.r.Available() }

// split is one split's generator and its output into the multiplexer.
type split struct {
	id    string
	gen   eventtime.Generator
	out   *eventtime.SplitOutput
	clock pausableClock // of the split's idleness
	quiet time.Duration // emitPeriodic's scratch
}

// pausableClock is the wall clock minus the time it spent paused: the
// clock of a split's idleness, paused while the split has a backlog.
type pausableClock struct {
	paused   bool
	pausedAt time.Time
	lost     time.Duration // paused so far, before pausedAt
}

func (c *pausableClock) now() time.Time {
	if c.paused {
		return c.pausedAt.Add(-c.lost)
	}
	return time.Now().Add(-c.lost)
}

func (c *pausableClock) pause(on bool) {
	switch {
	case on && !c.paused:
		c.paused, c.pausedAt = true, time.Now()
	case !on && c.paused:
		c.paused = false
		c.lost += time.Since(c.pausedAt)
	}
}

// splitSourceOp drives a SplitReader: positions and Close as sourceOp,
// plus a watermark generator per split combined by an
// eventtime.Multiplexer (Flink's SourceOperator with per-split
// watermarks).
type splitSourceOp[T any] struct {
	sourceOp[T]
	sr       SplitReader[T]
	strategy *WatermarkStrategy[T]
	interval int64 // ms between periodic emissions; 0: none

	ctx    *task.OperatorContext
	emit   chainOutput
	mux    *eventtime.Multiplexer // nil until the first poll
	splits []*split
	// emitOrder is emitPeriodic's scratch.
	emitOrder []*split
	index     map[string]int // split id -> position in splits
	last      *split         // of the previous record
	reg       Splits

	pending []pendingPosition // positions of checkpoints not yet complete
}

type pendingPosition struct {
	id  barrier.CheckpointID
	pos []byte
}

func (o *splitSourceOp[T]) Open(ctx *task.OperatorContext) error {
	if err := o.sourceOp.Open(ctx); err != nil {
		return err
	}
	o.ctx, o.emit.ctx = ctx, ctx
	o.reg = Splits{add: o.addSplit, remove: o.removeSplit, backlog: o.setBacklog}
	if err := o.sr.Start(&o.reg); err != nil {
		return o.fail(err)
	}
	if err := o.splitsErr(); err != nil {
		return err
	}
	if o.interval > 0 {
		ctx.RequestProcessingTime(ctx.ProcessingTime() + o.interval)
	}
	return nil
}

func (o *splitSourceOp[T]) splitsErr() error {
	err := o.reg.err
	o.reg.err = nil
	if err != nil {
		return o.fail(err)
	}
	return nil
}

func (o *splitSourceOp[T]) addSplit(id string) error {
	if _, ok := o.index[id]; ok {
		return fmt.Errorf("split %q added twice", id)
	}
	s := &split{id: id}
	g, err := o.strategy.newGenerator()
	if err == nil && o.strategy.idleness > 0 {
		g, err = eventtime.NewIdleness(g, o.strategy.idleness, s.clock.now)
	}
	if err != nil {
		return err
	}
	s.gen = g
	if o.mux != nil {
		s.out = o.mux.Add()
	}
	o.index[id] = len(o.splits)
	o.splits = append(o.splits, s)
	return nil
}

func (o *splitSourceOp[T]) removeSplit(id string) error {
	i, ok := o.index[id]
	if !ok {
		return fmt.Errorf("split %q removed but not registered", id)
	}
	s := o.splits[i]
	if o.mux != nil {
		o.mux.Remove(s.out)
	}
	o.splits = append(o.splits[:i], o.splits[i+1:]...)
	delete(o.index, id)
	for j := i; j < len(o.splits); j++ {
		o.index[o.splits[j].id] = j
	}
	if o.last == s {
		o.last = nil
	}
	return nil
}

func (o *splitSourceOp[T]) setBacklog(id string, backlog bool) {
	if i, ok := o.index[id]; ok {
		o.splits[i].clock.pause(backlog)
	}
}

// startWatermarks creates the multiplexer over the splits the reader
// started with. It runs at the first poll, once every operator of the
// chain is open, since its first decision (idle, for a subtask without
// splits) goes down the chain.
func (o *splitSourceOp[T]) startWatermarks() error {
	o.mux = eventtime.NewMultiplexer(&o.emit)
	for _, s := range o.splits {
		s.out = o.mux.Add()
	}
	o.mux.Combine()
	return o.emit.take()
}

func (o *splitSourceOp[T]) PollNext() (st task.SourceStatus, err error) {
	o.enter()
	if o.mux == nil {
		if err := o.startWatermarks(); err != nil {
			return task.EndOfInput, err
		}
	}
	rec, rs, err := o.sr.Poll()
	if err != nil {
		return task.EndOfInput, o.fail(err)
	}
	if err := o.splitsErr(); err != nil {
		return task.EndOfInput, err
	}
	if err := o.emit.take(); err != nil {
		return task.EndOfInput, err
	}
	switch rs {
	case Read:
	case NothingAvailable:
		return task.NothingAvailable, nil
	default:
		// The task emits the final watermark next; an idle stream's
		// watermark would be ignored downstream.
		o.emit.MarkActive()
		return task.EndOfInput, o.emit.take()
	}
	s := o.last
	if s == nil || s.id != rec.Split {
		i, ok := o.index[rec.Split]
		if !ok {
			return task.EndOfInput, o.fail(fmt.Errorf("a record of split %q, which the reader did not add", rec.Split))
		}
		s = o.splits[i]
		o.last = s
	}
	ts := rec.Timestamp
	if o.strategy.timestamp != nil {
		ts = o.strategy.timestamp(rec.Value)
	}
	if err := o.next.collect(rec.Value, ts); err != nil {
		return task.EndOfInput, err
	}
	o.enter()
	s.gen.OnEvent(ts, s.out)
	return task.MoreAvailable, o.emit.take()
}

// quietGenerator is a generator that tells how long its stream has been
// quiet (eventtime.Idleness).
type quietGenerator interface{ Quiet() time.Duration }

// emitPeriodic runs the splits' periodic emits, those of the splits quiet
// longest first: splits turn idle in the order their idleness timeouts
// ran out, however late the emit comes. In split order, an emit late
// enough to find every split's timeout run out marked them idle one by
// one while a split that never had a record held the combined watermark
// at its minimum, then the subtask idle: the others' watermarks never
// passed on, and windows waited for records that would not come (a Kafka
// partition with no records, under load).
func (o *splitSourceOp[T]) emitPeriodic() {
	o.emitOrder = append(o.emitOrder[:0], o.splits...)
	if len(o.emitOrder) > 1 {
		for _, s := range o.emitOrder {
			s.quiet = 0
			if q, ok := s.gen.(quietGenerator); ok {
				s.quiet = q.Quiet()
			}
		}
		slices.SortStableFunc(o.emitOrder, func(a, b *split) int { return cmp.Compare(b.quiet, a.quiet) })
	}
	for _, s := range o.emitOrder {
		s.gen.OnPeriodicEmit(s.out)
	}
}

func (o *splitSourceOp[T]) OnProcessingTime(now int64) (err error) {
	o.enter()
	defer o.catch(&err)
	if o.mux != nil {
		o.emitPeriodic()
	}
	o.ctx.RequestProcessingTime(now + o.interval)
	return o.emit.take()
}

func (o *splitSourceOp[T]) SnapshotState(id barrier.CheckpointID) error {
	pr, ok := o.sr.(PositionedReader)
	if !ok {
		return nil
	}
	pos, err := pr.Position()
	if err != nil {
		return fmt.Errorf("weir: source %s: position: %w", o.name, err)
	}
	if _, ok := o.sr.(PositionCommitter); ok {
		o.pending = append(o.pending, pendingPosition{id: id, pos: pos})
	}
	return o.savePosition(pos)
}

// NotifyCheckpointComplete hands a PositionCommitter the position of the
// newest completed checkpoint; older ones are dropped.
func (o *splitSourceOp[T]) NotifyCheckpointComplete(id barrier.CheckpointID) error {
	pc, ok := o.sr.(PositionCommitter)
	if !ok {
		return nil
	}
	var pos []byte
	n := 0
	for _, p := range o.pending {
		if p.id > id {
			break
		}
		pos = p.pos
		n++
	}
	o.pending = o.pending[n:]
	if pos == nil {
		return nil
	}
	if err := pc.CommitPosition(pos); err != nil {
		return o.fail(err)
	}
	return nil
}

// NotifyCheckpointAborted drops the position of an aborted checkpoint.
func (o *splitSourceOp[T]) NotifyCheckpointAborted(id barrier.CheckpointID) error {
	for i, p := range o.pending {
		if p.id == id {
			o.pending = append(o.pending[:i], o.pending[i+1:]...)
			break
		}
	}
	return nil
}
