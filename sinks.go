package weir

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// Sink is the end of a stream; Name and Parallelism configure it.
type Sink struct {
	env *Environment
	n   *graph.Node
}

// Name sets the sink's name.
func (s *Sink) Name(name string) *Sink { s.n.Name = name; return s }

// Parallelism sets the sink's parallelism.
func (s *Sink) Parallelism(p int) *Sink {
	if p < 1 {
		s.env.cfg.errs = append(s.env.cfg.errs, fmt.Errorf("weir: sink %s: parallelism %d must be at least 1", s.n.Name, p))
	}
	s.n.Parallelism = p
	return s
}

// UID sets the sink's stable state ID.
func (s *Sink) UID(id string) *Sink { s.n.UID = id; return s }

// addSink adds a sink consuming s; build makes one subtask's sink.
func addSink[T any](s *Stream[T], name string, build func(rc *graph.Subtask) (collector[T], task.Operator, error)) *Sink {
	n := s.env.addNode(&graph.Node{Name: name})
	connect(s, n)
	n.Instantiate = func(rc *graph.Subtask, _ any) (any, task.Operator, error) {
		return build(rc)
	}
	return &Sink{env: s.env, n: n}
}

// SinkFunc sends every value of s to fn; an error fails the task. With
// several subtasks fn is called from several goroutines.
func SinkFunc[T any](s *Stream[T], fn func(T) error) *Sink {
	return addSink(s, "sink", func(rc *graph.Subtask) (collector[T], task.Operator, error) {
		o := &funcSink[T]{opBase: base(rc), fn: fn}
		return o, o, nil
	})
}

type funcSink[T any] struct {
	opBase
	fn func(T) error
}

func (o *funcSink[T]) collect(v T, _ int64) (err error) {
	o.enter()
	if err := o.fn(v); err != nil {
		return o.fail(err)
	}
	return nil
}

// Discard consumes s and drops every value (for benchmarks).
func Discard[T any](s *Stream[T]) *Sink {
	return addSink(s, "discard", func(rc *graph.Subtask) (collector[T], task.Operator, error) {
		o := &discardSink[T]{opBase: base(rc)}
		return o, o, nil
	})
}

type discardSink[T any] struct{ opBase }

func (*discardSink[T]) collect(T, int64) error { return nil }

// Print writes every value of s to standard output, one per line.
func Print[T any](s *Stream[T]) *Sink { return PrintTo(s, os.Stdout) }

// PrintTo writes every value of s to w, one per line, prefixed with the
// subtask index when the sink has several. Writes are serialized.
func PrintTo[T any](s *Stream[T], w io.Writer) *Sink {
	var mu sync.Mutex
	return addSink(s, "print", func(rc *graph.Subtask) (collector[T], task.Operator, error) {
		o := &funcSink[T]{opBase: base(rc)}
		prefix := ""
		if rc.Parallelism > 1 {
			prefix = fmt.Sprintf("%d> ", rc.Index+1)
		}
		o.fn = func(v T) error {
			mu.Lock()
			defer mu.Unlock()
			_, err := fmt.Fprintf(w, "%s%v\n", prefix, v)
			return err
		}
		return o, o, nil
	})
}

// Collected holds the values a Collect sink received.
type Collected[T any] struct {
	mu struct {
		sync.Mutex
		sub map[int][]T // final values per subtask
	}
}

// Values returns what was collected, in no particular order across
// subtasks. Call it after Execute returned.
func (c *Collected[T]) Values() []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	subs := make([]int, 0, len(c.mu.sub))
	for i := range c.mu.sub {
		subs = append(subs, i)
	}
	slices.Sort(subs)
	var out []T
	for _, i := range subs {
		out = append(out, c.mu.sub[i]...)
	}
	return out
}

// Collect gathers every value of s in memory (for tests and small results).
// Each subtask collects locally and hands its values over when it
// finishes. The values collected so far are part of the sink's checkpointed
// state, so with checkpointing a restarted job collects each value exactly
// once: the stream's type then needs a codec (WithCodec; Execute fails
// without one).
func Collect[T any](s *Stream[T]) (*Collected[T], *Sink) {
	c := &Collected[T]{}
	c.mu.sub = map[int][]T{}
	sink := addSink(s, "collect", func(rc *graph.Subtask) (collector[T], task.Operator, error) {
		o := &collectSink[T]{opBase: base(rc), c: c, subtask: rc.Index, codec: s.codec}
		return o, o, nil
	})
	s.env.check(func() error {
		if s.env.cfg.ckpt != nil && s.codec == nil {
			return noCodec[T]("collect sink "+sink.n.Name, "with checkpointing on, its values are checkpointed",
				"call WithCodec on the stream passed to Collect")
		}
		return nil
	})
	return c, sink
}

type collectSink[T any] struct {
	opBase
	c       *Collected[T]
	subtask int
	codec   codec.Codec[T]
	local   []T
	st      *state.OperatorListState[T]
}

func (o *collectSink[T]) Open(ctx *task.OperatorContext) error {
	if o.codec == nil {
		return nil
	}
	st, err := state.GetOperatorListState(ctx.OperatorState, state.ListDescriptor[T]{Name: "collected", Codec: o.codec}, state.SplitDistribute)
	if err != nil {
		return err
	}
	o.st = st
	if ctx.Restored {
		vs, err := st.Get()
		if err != nil {
			return err
		}
		o.local = vs
	}
	return nil
}

func (o *collectSink[T]) collect(v T, _ int64) error {
	o.local = append(o.local, v)
	return nil
}

func (o *collectSink[T]) SnapshotState(id barrier.CheckpointID) error {
	if o.st == nil {
		return fmt.Errorf("weir: collect sink %s: the stream's type has no codec, so its values cannot be checkpointed (call WithCodec)", o.name)
	}
	return o.st.Update(o.local)
}

func (o *collectSink[T]) Finish() error {
	o.c.mu.Lock()
	o.c.mu.sub[o.subtask] = o.local
	o.c.mu.Unlock()
	return nil
}
