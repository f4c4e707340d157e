package weir

import (
	"runtime/debug"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/task"
)

// opBase implements task.Operator's hooks with no-ops; typed operators
// embed it and override what they need.
type opBase struct {
	id, name string
	kind     string // the node's Kind (task.KindedOperator)
	keyed    bool
	run      *task.CurrentOperator // the chain's mark of the operator running
}

func (o *opBase) ID() string                                           { return o.id }
func (o *opBase) Name() string                                         { return o.name }
func (o *opBase) Kind() string                                         { return o.kind }
func (o *opBase) Keyed() bool                                          { return o.keyed }
func (o *opBase) Open(*task.OperatorContext) error                     { return nil }
func (o *opBase) Finish() error                                        { return nil }
func (o *opBase) Close() error                                         { return nil }
func (o *opBase) PrepareSnapshotPreBarrier(barrier.CheckpointID) error { return nil }
func (o *opBase) SnapshotState(barrier.CheckpointID) error             { return nil }
func (o *opBase) NotifyCheckpointComplete(barrier.CheckpointID) error  { return nil }
func (o *opBase) NotifyCheckpointAborted(barrier.CheckpointID) error   { return nil }

// enter marks o as the operator running, so that a panic the task
// recovers names it. Every per-record entry point of an operator calls it
// (instead of a deferred recover per record), and so does code that
// resumes o's user code after a call downstream.
func (o *opBase) enter() { o.run.Set(&o.name) }

// catch turns a panic into an error naming the operator running (o, or
// one downstream that o called). It is deferred by the hooks that run user
// code outside the per-record path (open, watermarks, timers), which call
// enter first.
func (o *opBase) catch(err *error) {
	if r := recover(); r != nil {
		name := o.run.Name()
		if name == "" {
			name = o.name
		}
		*err = &task.Error{Operator: name, Err: &task.PanicError{Value: r, Stack: debug.Stack()}}
	}
}

// fail wraps an error returned by user code.
func (o *opBase) fail(err error) error {
	return &task.Error{Operator: o.name, Err: err}
}

func base(rc *graph.Subtask) opBase {
	return opBase{id: rc.Node.UID, name: rc.Node.Name, kind: rc.Node.Kind, keyed: rc.Node.Keyed, run: rc.Running}
}

// Map returns a stream of fn applied to every value of s.
func Map[In, Out any](s *Stream[In], fn func(In) Out) *Stream[Out] {
	return addOp(s, "map", func(rc *graph.Subtask, next collector[Out]) (collector[In], task.Operator) {
		o := &mapOp[In, Out]{opBase: base(rc), fn: fn, next: next}
		return o, o
	})
}

type mapOp[In, Out any] struct {
	opBase
	fn   func(In) Out
	next collector[Out]
}

func (o *mapOp[In, Out]) collect(v In, ts int64) (err error) {
	o.enter()
	return o.next.collect(o.fn(v), ts)
}

// MapErr is Map with a function that may fail; an error fails the task.
func MapErr[In, Out any](s *Stream[In], fn func(In) (Out, error)) *Stream[Out] {
	return addOp(s, "map", func(rc *graph.Subtask, next collector[Out]) (collector[In], task.Operator) {
		o := &mapErrOp[In, Out]{opBase: base(rc), fn: fn, next: next}
		return o, o
	})
}

type mapErrOp[In, Out any] struct {
	opBase
	fn   func(In) (Out, error)
	next collector[Out]
}

func (o *mapErrOp[In, Out]) collect(v In, ts int64) (err error) {
	o.enter()
	r, err := o.fn(v)
	if err != nil {
		return o.fail(err)
	}
	return o.next.collect(r, ts)
}

// Filter returns the values of s for which keep returns true.
func Filter[T any](s *Stream[T], keep func(T) bool) *Stream[T] {
	out := addOp(s, "filter", func(rc *graph.Subtask, next collector[T]) (collector[T], task.Operator) {
		o := &filterOp[T]{opBase: base(rc), fn: keep, next: next}
		return o, o
	})
	out.codec = s.codec
	return out
}

type filterOp[T any] struct {
	opBase
	fn   func(T) bool
	next collector[T]
}

func (o *filterOp[T]) collect(v T, ts int64) (err error) {
	o.enter()
	if o.fn(v) {
		return o.next.collect(v, ts)
	}
	return nil
}

// FlatMap calls fn for every value of s; fn emits any number of outputs
// through emit.
func FlatMap[In, Out any](s *Stream[In], fn func(v In, emit func(Out))) *Stream[Out] {
	return addOp(s, "flat map", func(rc *graph.Subtask, next collector[Out]) (collector[In], task.Operator) {
		o := &flatMapOp[In, Out]{opBase: base(rc), fn: fn, next: next}
		o.emit = func(v Out) {
			if o.err == nil {
				o.err = o.next.collect(v, o.ts)
				o.enter()
			}
		}
		return o, o
	})
}

type flatMapOp[In, Out any] struct {
	opBase
	fn   func(In, func(Out))
	next collector[Out]
	emit func(Out)
	ts   int64 // of the input value, for its outputs
	err  error
}

func (o *flatMapOp[In, Out]) collect(v In, ts int64) (err error) {
	o.enter()
	o.ts = ts
	o.fn(v, o.emit)
	err, o.err = o.err, nil
	return err
}

// addOp adds a one-input operator consuming s. build makes one subtask's
// operator given its downstream collector.
func addOp[In, Out any](s *Stream[In], name string, build func(rc *graph.Subtask, next collector[Out]) (collector[In], task.Operator)) *Stream[Out] {
	n := s.env.addNode(&graph.Node{Name: name})
	connect(s, n)
	n.Instantiate = func(rc *graph.Subtask, out any) (any, task.Operator, error) {
		next, _ := out.(collector[Out])
		if next == nil {
			next = discard[Out]{}
		}
		in, op := build(rc, next)
		return in, op, nil
	}
	out := newStream[Out](s.env, n)
	out.timestamped = s.timestamped // operators keep their input's timestamps
	return out
}

// discard drops values (an operator whose output nobody consumes).
type discard[T any] struct{}

func (discard[T]) collect(T, int64) error { return nil }
