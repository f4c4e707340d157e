package weir

import (
	"encoding/binary"
	"fmt"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// SourceReader reads one subtask's share of a source. The task pulls it in
// its own loop, between checkpoints, so Next should return promptly.
type SourceReader[T any] interface {
	// Next returns the next value, or ok=false at the end of input.
	Next() (v T, ok bool, err error)
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

// FromReader returns a stream read by one reader per subtask; newReader is
// called once per subtask (and again after every restart).
func FromReader[T any](env *Environment, name string, newReader func(subtask, parallelism int) (SourceReader[T], error)) *Stream[T] {
	n := env.addNode(&node{name: name, isSource: true})
	n.instantiate = func(rc *runtimeContext, out any) (any, task.Operator, error) {
		next, _ := out.(collector[T])
		if next == nil {
			next = discard[T]{}
		}
		r, err := newReader(rc.subtask, rc.parallelism)
		if err != nil {
			return nil, nil, fmt.Errorf("weir: source %s subtask %d: %w", name, rc.subtask, err)
		}
		o := &sourceOp[T]{opBase: base(rc), r: r, next: next, subtask: rc.subtask, parallelism: rc.parallelism}
		return o, o, nil
	}
	return newStream[T](env, n)
}

// FromSlice returns a bounded stream of items; subtask i of p reads items
// i, i+p, i+2p, …
func FromSlice[T any](env *Environment, items []T) *Stream[T] {
	return FromReader(env, "slice source", func(sub, par int) (SourceReader[T], error) {
		return &sliceReader[T]{items: items, next: int64(sub), step: int64(par)}, nil
	})
}

// FromGenerator returns the stream gen(0), gen(1), …, gen(n-1) (unbounded
// when n < 0); subtask i of p generates indices i, i+p, …
func FromGenerator[T any](env *Environment, n int64, gen func(i int64) T) *Stream[T] {
	return FromReader(env, "generator source", func(sub, par int) (SourceReader[T], error) {
		return &genReader[T]{gen: gen, n: n, next: int64(sub), step: int64(par)}, nil
	})
}

type sliceReader[T any] struct {
	items      []T
	next, step int64
}

func (r *sliceReader[T]) Next() (T, bool, error) {
	if r.next >= int64(len(r.items)) {
		var zero T
		return zero, false, nil
	}
	v := r.items[r.next]
	r.next += r.step
	return v, true, nil
}

func (r *sliceReader[T]) Position() ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, uint64(r.next)), nil
}

func (r *sliceReader[T]) Seek(pos []byte) error {
	if len(pos) != 8 {
		return fmt.Errorf("weir: slice source position of %d bytes", len(pos))
	}
	r.next = int64(binary.BigEndian.Uint64(pos))
	return nil
}

type genReader[T any] struct {
	gen        func(int64) T
	n          int64
	next, step int64
}

func (r *genReader[T]) Next() (T, bool, error) {
	if r.n >= 0 && r.next >= r.n {
		var zero T
		return zero, false, nil
	}
	v := r.gen(r.next)
	r.next += r.step
	return v, true, nil
}

func (r *genReader[T]) Position() ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, uint64(r.next)), nil
}

func (r *genReader[T]) Seek(pos []byte) error {
	if len(pos) != 8 {
		return fmt.Errorf("weir: generator source position of %d bytes", len(pos))
	}
	r.next = int64(binary.BigEndian.Uint64(pos))
	return nil
}

// sourceOp drives a reader as a task's source and its chain head.
type sourceOp[T any] struct {
	opBase
	r           SourceReader[T]
	next        collector[T]
	subtask     int
	parallelism int
	pos         *state.OperatorListState[[]byte]
}

// Source positions are kept as union operator state: every element is
// (subtask, parallelism, position) and each subtask picks its own on
// restore.
func (o *sourceOp[T]) Open(ctx *task.OperatorContext) error {
	st, err := state.GetOperatorListState(ctx.OperatorState, state.ListDescriptor[[]byte]{Name: "source-position", Codec: codec.Bytes()}, state.UnionDistribute)
	if err != nil {
		return err
	}
	o.pos = st
	if !ctx.Restored {
		return nil
	}
	elems, err := st.Get()
	if err != nil {
		return err
	}
	for _, e := range elems {
		if len(e) < 8 {
			return fmt.Errorf("weir: source %s: corrupt position state (%d bytes)", o.name, len(e))
		}
		sub, par := int(binary.BigEndian.Uint32(e)), int(binary.BigEndian.Uint32(e[4:]))
		if sub != o.subtask {
			continue
		}
		if par != o.parallelism {
			return fmt.Errorf("weir: source %s: parallelism changed from %d to %d; its readers cannot be rescaled", o.name, par, o.parallelism)
		}
		pr, ok := o.r.(PositionedReader)
		if !ok {
			return fmt.Errorf("weir: source %s restored from checkpoint %d but its reader cannot seek (implement PositionedReader)", o.name, ctx.RestoredID)
		}
		return pr.Seek(e[8:])
	}
	return nil
}

func (o *sourceOp[T]) SnapshotState(barrier.CheckpointID) error {
	pr, ok := o.r.(PositionedReader)
	if !ok {
		return nil
	}
	pos, err := pr.Position()
	if err != nil {
		return fmt.Errorf("weir: source %s: position: %w", o.name, err)
	}
	e := binary.BigEndian.AppendUint32(nil, uint32(o.subtask))
	e = binary.BigEndian.AppendUint32(e, uint32(o.parallelism))
	return o.pos.Update([][]byte{append(e, pos...)})
}

func (o *sourceOp[T]) PollNext() (st task.SourceStatus, err error) {
	defer o.catch(&err)
	v, ok, err := o.r.Next()
	if err != nil {
		return task.EndOfInput, o.fail(err)
	}
	if !ok {
		return task.EndOfInput, nil
	}
	return task.MoreAvailable, o.next.collect(v)
}

func (o *sourceOp[T]) Available() <-chan struct{} { return nil }
