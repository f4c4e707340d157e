package weir

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// SourceReader reads one subtask's share of a source. The task pulls it in
// its own loop, between checkpoints and timers, so Next must return
// promptly: a reader that has to wait for data (a queue, a socket, a
// channel) implements PollingReader instead.
type SourceReader[T any] interface {
	// Next returns the next value, or ok=false at the end of input.
	Next() (v T, ok bool, err error)
}

// ReadStatus is what one PollingReader.Poll found.
type ReadStatus uint8

const (
	// Read: the returned value is the next one.
	Read ReadStatus = iota
	// NothingAvailable: no value now. The task takes checkpoints, fires
	// timers and emits watermarks meanwhile, and polls again once the
	// reader's Available channel is ready; it burns no CPU while it waits.
	NothingAvailable
	// EndOfInput: the reader is exhausted.
	EndOfInput
)

// PollingReader reads one subtask's share of a source that may have
// nothing to read for a while (Flink's FLIP-27 SourceReader): instead of
// blocking, Poll says so, and Available tells when to poll again. It may
// also implement PositionedReader, RescalableReader and io.Closer (Close
// is called once when the task ends).
type PollingReader[T any] interface {
	// Poll returns the next value (Read), NothingAvailable, or
	// EndOfInput. It must not block.
	Poll() (v T, st ReadStatus, err error)
	// Available returns a channel that becomes ready (receives a value or
	// is closed) once Poll may return a value again. It is called after
	// Poll returned NothingAvailable.
	Available() <-chan struct{}
}

// PositionedReader is a SourceReader whose position can be checkpointed and
// restored, so that after a failure the source rewinds to exactly where the
// last completed checkpoint was taken (exactly-once replay).
type PositionedReader interface {
	// Position encodes the reader's current position: the next value it
	// would return.
	Position() ([]byte, error)
	// Seek restores a position returned by Position, before the first Next.
	Seek(pos []byte) error
}

// ReaderIdentifier is an optional interface of a PositionedReader: what
// its positions mean, recorded with them in every checkpoint. A restore
// hands a source's positions to its new reader only if the new reader
// has the identity the old one had (FLIP-27's split serializer in
// spirit): a reader of another file, stream or kind would read the old
// positions as its own and silently skip or repeat records. The identity
// names the implementation and what the positions are offsets into (the
// built-in readers': "file <path>", "kafka", "nats stream <name>",
// "weir indices"), must be the same for every subtask and should not
// change with configuration that keeps the positions' meaning (a Kafka
// source's positions name their topics, so its topic list is not part of
// it). A reader without the interface is identified by its Go type
// (fmt's %T); an empty identity is not checked.
type ReaderIdentifier interface {
	ReaderIdentity() string
}

// ErrSourceChanged is wrapped by the error of a restore whose source
// positions were written by a reader of another identity
// (ReaderIdentifier) than the source's reader now. It wraps
// state.ErrIncompatibleState: the restore is refused before any record,
// and a restart strategy does not retry it.
var ErrSourceChanged = fmt.Errorf("weir: a source's positions were written by another reader: %w", state.ErrIncompatibleState)

// SourceChangedError is the error of a source whose restored positions
// were written by a reader of another identity.
type SourceChangedError struct {
	Source, ID    string // the source's name and operator ID
	Checkpoint    barrier.CheckpointID
	Restored, Now string // the readers' identities
}

func (e *SourceChangedError) Error() string {
	return fmt.Sprintf("weir: source %s (ID %q): its positions in checkpoint %d were written by reader %q, its reader now is %q, which "+
		"would read them as its own: give the new source a new UID (it starts from its beginning; restore "+
		"WithAllowNonRestoredState(true) to drop the old source's positions), or, if the new reader reads the old one's "+
		"positions, have it implement weir.ReaderIdentifier returning %q", e.Source, e.ID, e.Checkpoint, e.Restored, e.Now, e.Restored)
}

func (e *SourceChangedError) Unwrap() error { return ErrSourceChanged }

// readerIdentity is r's ReaderIdentity, or its Go type.
func readerIdentity(r any) string {
	if ri, ok := r.(ReaderIdentifier); ok {
		return ri.ReaderIdentity()
	}
	return fmt.Sprintf("%T", r)
}

// FromReader returns a stream read by one reader per subtask; newReader is
// called once per subtask (and again after every restart). name is what
// logs and errors call the source; it may change between a savepoint and
// its restore (the source's kind, recorded with its state, is "source").
func FromReader[T any](env *Environment, name string, newReader func(subtask, parallelism int) (SourceReader[T], error)) *Stream[T] {
	return fromReader(env, kindSource, name, newReader)
}

// Operator kinds: what an operator is, recorded with its state in every
// checkpoint (a restore hands an operator's state only to an operator of
// its kind) and part of its generated ID. A kind is the operator's
// implementation, never a name or configuration the user gave: a source
// named after its topic or file is a "source" whatever it reads. The
// other kinds are the constant names of their constructors (see addNode):
// "map", "reduce", "process", "window aggregate", "interval join",
// "two-phase-commit sink", ….
const (
	kindSource      = "source"       // FromReader, FromPollingReader
	kindSplitSource = "split source" // FromSplitReader (and the Kafka source)
)

// fromReader is FromReader with the source's kind.
func fromReader[T any](env *Environment, kind, name string, newReader func(subtask, parallelism int) (SourceReader[T], error)) *Stream[T] {
	return addSource(env, kind, name, func(sub, par int) (PollingReader[T], error) {
		r, err := newReader(sub, par)
		if err != nil {
			return nil, err
		}
		return &nextPoller[T]{r: r}, nil
	})
}

// FromPollingReader returns a stream read by one polling reader per
// subtask; newReader is called once per subtask (and again after every
// restart). Use it for sources that wait for data. As with FromReader,
// name may change between a savepoint and its restore.
func FromPollingReader[T any](env *Environment, name string, newReader func(subtask, parallelism int) (PollingReader[T], error)) *Stream[T] {
	return addSource(env, kindSource, name, newReader)
}

// addSource adds a source of kind (kindSource, or the kind of a built-in
// source: "slice source", "generator source", …) called name.
func addSource[T any](env *Environment, kind, name string, newReader func(subtask, parallelism int) (PollingReader[T], error)) *Stream[T] {
	n := env.addNode(&graph.Node{Name: name, Kind: kind, Source: true})
	n.Instantiate = func(rc *graph.Subtask, out any) (any, task.Operator, error) {
		next, _ := out.(collector[T])
		if next == nil {
			next = discard[T]{}
		}
		r, err := newReader(rc.Index, rc.Parallelism)
		if err != nil {
			return nil, nil, fmt.Errorf("weir: source %s subtask %d: %w", name, rc.Index, err)
		}
		o := &sourceOp[T]{opBase: base(rc), r: r, next: next, subtask: rc.Index, parallelism: rc.Parallelism}
		return o, o, nil
	}
	return newStream[T](env, n)
}

// nextPoller polls a SourceReader. It forwards the reader's optional
// interfaces (positions, rescaling, Close).
type nextPoller[T any] struct{ r SourceReader[T] }

func (p *nextPoller[T]) Poll() (T, ReadStatus, error) {
	v, ok, err := p.r.Next()
	switch {
	case err != nil:
		return v, EndOfInput, err
	case !ok:
		return v, EndOfInput, nil
	}
	return v, Read, nil
}

func (p *nextPoller[T]) Available() <-chan struct{} { return nil }

// reader returns the user's reader behind r, for its optional interfaces.
func reader[T any](r PollingReader[T]) any {
	switch p := r.(type) {
	case *nextPoller[T]:
		return p.r
	case *splitPoller[T]:
		return p.r
	}
	return r
}

// RescalableReader is a PositionedReader that can also start from the
// positions of every subtask of a run at another parallelism (a job
// restored from a savepoint with a new parallelism): Rescale makes the
// reader of subtask of parallelism take its share of what those readers
// had not read yet, so that together the new readers read it exactly
// once. positions are in the old subtasks' order.
type RescalableReader interface {
	PositionedReader
	Rescale(positions [][]byte, subtask, parallelism int) error
}

// FromSlice returns a bounded stream of items; subtask i of p reads items
// i, i+p, i+2p, … It can be rescaled from a savepoint.
func FromSlice[T any](env *Environment, items []T) *Stream[T] {
	return fromReader(env, "slice source", "slice source", func(sub, par int) (SourceReader[T], error) {
		return &indexReader[T]{at: func(i int64) T { return items[i] }, idx: newStrided(int64(len(items)), sub, par)}, nil
	})
}

// FromGenerator returns the stream gen(0), gen(1), …, gen(n-1) (unbounded
// when n < 0); subtask i of p generates indices i, i+p, … It replays
// exactly from a checkpoint and can be rescaled from a savepoint. With
// Rate it generates at most that many values per second.
func FromGenerator[T any](env *Environment, n int64, gen func(i int64) T, opts ...GeneratorOption) *Stream[T] {
	var cfg generatorConfig
	for _, o := range opts {
		o.applyGenerator(&cfg)
	}
	if cfg.rate < 0 {
		env.cfg.errs = append(env.cfg.errs, fmt.Errorf("weir: generator source: rate %v must not be negative", cfg.rate))
	}
	if cfg.rate <= 0 {
		return fromReader(env, "generator source", "generator source", func(sub, par int) (SourceReader[T], error) {
			return &indexReader[T]{at: gen, idx: newStrided(n, sub, par)}, nil
		})
	}
	return addSource(env, "generator source", "generator source", func(sub, par int) (PollingReader[T], error) {
		r := &indexReader[T]{at: gen, idx: newStrided(n, sub, par)}
		return &rateReader[T]{indexReader: r, limit: newRateLimit(cfg.rate / float64(par))}, nil
	})
}

// indexReader reads at(i) for the indices of idx.
type indexReader[T any] struct {
	at  func(int64) T
	idx strided
}

func (r *indexReader[T]) Next() (T, bool, error) {
	i, ok := r.idx.next()
	if !ok {
		var zero T
		return zero, false, nil
	}
	return r.at(i), true, nil
}

func (r *indexReader[T]) Position() ([]byte, error) { return r.idx.encode(), nil }
func (r *indexReader[T]) ReaderIdentity() string    { return "weir indices" }
func (r *indexReader[T]) Seek(pos []byte) error     { return r.idx.decode(pos) }

func (r *indexReader[T]) Rescale(positions [][]byte, subtask, parallelism int) error {
	return r.idx.rescale(positions, subtask, parallelism)
}

// progression is the indices next, next+step, next+2·step, …
type progression struct{ next, step int64 }

// strided yields the indices below n (all when n < 0) of a set of
// progressions, one from each in turn. A fresh subtask i of p has the
// single progression (i, p); rescaling splits progressions so that every
// new subtask gets some.
type strided struct {
	n   int64
	ps  []progression // unexhausted
	cur int
}

func newStrided(n int64, sub, par int) strided {
	return strided{n: n, ps: []progression{{int64(sub), int64(par)}}}
}

func (s *strided) next() (int64, bool) {
	for len(s.ps) > 0 {
		if s.cur >= len(s.ps) {
			s.cur = 0
		}
		p := &s.ps[s.cur]
		if s.n >= 0 && p.next >= s.n {
			s.ps = append(s.ps[:s.cur], s.ps[s.cur+1:]...)
			continue
		}
		i := p.next
		p.next += p.step
		s.cur++
		return i, true
	}
	return 0, false
}

// encode is the position: 16 bytes (next, step) per progression.
func (s *strided) encode() []byte {
	b := make([]byte, 0, 16*len(s.ps))
	for _, p := range s.ps {
		b = binary.BigEndian.AppendUint64(b, uint64(p.next))
		b = binary.BigEndian.AppendUint64(b, uint64(p.step))
	}
	return b
}

func (s *strided) decode(pos []byte) error {
	ps, err := decodeProgressions(pos)
	if err != nil {
		return err
	}
	s.ps, s.cur = ps, 0
	return nil
}

func decodeProgressions(pos []byte) ([]progression, error) {
	if len(pos)%16 != 0 {
		return nil, fmt.Errorf("weir: source position of %d bytes", len(pos))
	}
	ps := make([]progression, 0, len(pos)/16)
	for ; len(pos) > 0; pos = pos[16:] {
		p := progression{int64(binary.BigEndian.Uint64(pos)), int64(binary.BigEndian.Uint64(pos[8:]))}
		if p.step <= 0 || p.next < 0 {
			return nil, fmt.Errorf("weir: corrupt source position (next %d, step %d)", p.next, p.step)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// rescale takes subtask sub of par's share of the old subtasks'
// progressions: every subtask computes the same list (unexhausted
// progressions, split in two until there are at least par) and takes
// every par-th one.
func (s *strided) rescale(positions [][]byte, sub, par int) error {
	var all []progression
	for _, pos := range positions {
		ps, err := decodeProgressions(pos)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if s.n < 0 || p.next < s.n {
				all = append(all, p)
			}
		}
	}
	for len(all) > 0 && len(all) < par {
		p := all[0]
		all = append(all[1:], progression{p.next, 2 * p.step}, progression{p.next + p.step, 2 * p.step})
	}
	s.ps, s.cur = nil, 0
	for j := sub; j < len(all); j += par {
		s.ps = append(s.ps, all[j])
	}
	return nil
}

// sourceOp drives a reader as a task's source and its chain head.
type sourceOp[T any] struct {
	opBase
	r           PollingReader[T]
	next        collector[T]
	subtask     int
	parallelism int
	pos         *state.OperatorListState[[]byte]
}

// Source positions are kept as union operator state: every element is
// (subtask, parallelism, position) and each subtask picks its own on
// restore. The identity of the reader that wrote them (ReaderIdentifier)
// is union state too, one element per subtask: a restore into a reader
// of another identity is refused. Checkpoints written before weir
// recorded it have none: their positions are handed over unchecked.
func (o *sourceOp[T]) Open(ctx *task.OperatorContext) error {
	st, err := state.GetOperatorListState(ctx.OperatorState, state.ListDescriptor[[]byte]{Name: "source-position", Codec: codec.Bytes()}, state.UnionDistribute)
	if err != nil {
		return err
	}
	o.pos = st
	if w, ok := reader(o.r).(interface{ warnNotReplayable(*task.OperatorContext) }); ok {
		w.warnNotReplayable(ctx)
	}
	pr, positioned := reader(o.r).(PositionedReader)
	var restoredIDs []string
	if positioned {
		ids, err := state.GetOperatorListState(ctx.OperatorState, state.ListDescriptor[string]{Name: "source-reader", Codec: codec.String()}, state.UnionDistribute)
		if err != nil {
			return err
		}
		if ctx.Restored {
			if restoredIDs, err = ids.Get(); err != nil {
				return err
			}
		}
		if err := ids.Update([]string{readerIdentity(pr)}); err != nil {
			return err
		}
	}
	if !ctx.Restored {
		return nil
	}
	elems, err := st.Get()
	if err != nil {
		return err
	}
	if !positioned {
		if len(elems) == 0 {
			return nil
		}
		return fmt.Errorf("weir: source %s restored from checkpoint %d but its reader cannot seek (implement PositionedReader)", o.name, ctx.RestoredID)
	}
	if len(elems) == 0 {
		// No positions in the restore point: a source the job did not
		// have (a new one, or one under a new UID) starts from its
		// beginning. (A source whose subtasks had all finished restores
		// finished and is not opened.)
		return nil
	}
	if now := readerIdentity(pr); now != "" {
		for _, was := range restoredIDs {
			if was != "" && was != now {
				return &SourceChangedError{Source: o.name, ID: o.id, Checkpoint: ctx.RestoredID, Restored: was, Now: now}
			}
		}
	}
	// Every element is (subtask, parallelism, position); all come from
	// one run, so they agree on the parallelism. A subtask that had
	// finished left none (it is restored finished: it does not read).
	var old [][]byte
	oldPar := -1
	for _, e := range elems {
		if len(e) < 8 {
			return fmt.Errorf("weir: source %s: corrupt position state (%d bytes)", o.name, len(e))
		}
		sub, par := int(binary.BigEndian.Uint32(e)), int(binary.BigEndian.Uint32(e[4:]))
		if oldPar == -1 {
			oldPar = par
			old = make([][]byte, par)
		}
		if par != oldPar || par < len(elems) || sub >= par || old[sub] != nil {
			return fmt.Errorf("weir: source %s: inconsistent position state", o.name)
		}
		old[sub] = e[8:]
	}
	if oldPar == o.parallelism {
		if old[o.subtask] == nil {
			return fmt.Errorf("weir: source %s: no position for subtask %d in checkpoint %d", o.name, o.subtask, ctx.RestoredID)
		}
		return pr.Seek(old[o.subtask])
	}
	if len(elems) < oldPar {
		return fmt.Errorf("weir: source %s: %d of its %d subtasks had finished in checkpoint %d; it restores only at parallelism %d",
			o.name, oldPar-len(elems), oldPar, ctx.RestoredID, oldPar)
	}
	rr, ok := reader(o.r).(RescalableReader)
	if !ok {
		return fmt.Errorf("weir: source %s: parallelism changed from %d to %d; its readers cannot be rescaled (implement RescalableReader)", o.name, oldPar, o.parallelism)
	}
	return rr.Rescale(old, o.subtask, o.parallelism)
}

func (o *sourceOp[T]) SnapshotState(barrier.CheckpointID) error {
	pr, ok := reader(o.r).(PositionedReader)
	if !ok {
		return nil
	}
	pos, err := pr.Position()
	if err != nil {
		return fmt.Errorf("weir: source %s: position: %w", o.name, err)
	}
	return o.savePosition(pos)
}

// savePosition stores the reader's position as the subtask's element of
// the union state.
func (o *sourceOp[T]) savePosition(pos []byte) error {
	e := binary.BigEndian.AppendUint32(nil, uint32(o.subtask))
	e = binary.BigEndian.AppendUint32(e, uint32(o.parallelism))
	return o.pos.Update([][]byte{append(e, pos...)})
}

func (o *sourceOp[T]) PollNext() (st task.SourceStatus, err error) {
	o.enter()
	v, rs, err := o.r.Poll()
	switch {
	case err != nil:
		return task.EndOfInput, o.fail(err)
	case rs == NothingAvailable:
		return task.NothingAvailable, nil
	case rs != Read:
		return task.EndOfInput, nil
	}
	return task.MoreAvailable, o.next.collect(v, eventtime.NoTimestamp)
}

func (o *sourceOp[T]) Available() <-chan struct{} { return o.r.Available() }

// Close closes the reader if it is an io.Closer.
func (o *sourceOp[T]) Close() error {
	if c, ok := reader(o.r).(io.Closer); ok {
		return c.Close()
	}
	return nil
}
