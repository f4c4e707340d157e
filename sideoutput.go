package weir

import (
	"fmt"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/task"
)

// OutputTag names a side output of a process function: a second stream of
// values of type T, besides the function's main output (Flink's
// OutputTag). A function emits to it with Output; SideOutput on the
// function's result stream returns the side stream.
type OutputTag[T any] struct {
	id    string
	codec codec.Codec[T]
}

// NewOutputTag returns a tag called id; its values are serialized with the
// built-in codec of T, if it has one (WithCodec sets another).
func NewOutputTag[T any](id string) *OutputTag[T] {
	return &OutputTag[T]{id: id, codec: defaultCodec[T]()}
}

// WithCodec sets how the tag's values are serialized when they cross a
// task boundary, and returns t.
func (t *OutputTag[T]) WithCodec(c codec.Codec[T]) *OutputTag[T] {
	t.codec = c
	return t
}

// ID is the tag's name.
func (t *OutputTag[T]) ID() string { return t.id }

// Output emits v to the side output tag of the process function that ctx
// belongs to, with the timestamp of the value (or timer) being processed.
// A tag nobody reads (no SideOutput of it) drops v. An error downstream
// fails the call of the function that emitted, after it returns.
func Output[T any](ctx *RuntimeContext, tag *OutputTag[T], v T) {
	if ctx.err != nil || ctx.sides == nil {
		return
	}
	c := ctx.sides.of(tag)
	if c == nil {
		return
	}
	ctx.err = c.(collector[T]).collect(v, ctx.ts)
	if ctx.sides.owner != nil {
		ctx.sides.owner.enter()
	}
}

// SideOutput returns the stream of the values that the process function
// producing s (Process, CoProcess, KeyedCoProcess, BroadcastProcess,
// KeyedBroadcastProcess) emits to tag. Its consumers run in tasks of their
// own.
func SideOutput[T, Out any](s *Stream[Out], tag *OutputTag[T]) *Stream[T] {
	env := s.env
	if !s.process || s.n == nil {
		env.fail(fmt.Errorf("weir: side output %q: the stream is not the output of a process function", tag.id))
		return newStream[T](env, env.addNode(&graph.Node{Name: "side output", Source: true}))
	}
	side := &Stream[T]{env: env, n: s.n, codec: tag.codec, timestamped: s.timestamped}
	k := 0
	for i, so := range s.n.Sides {
		if so.Tag == tag {
			k = i + 1
		}
	}
	if k == 0 {
		s.n.Sides = append(s.n.Sides, graph.SideOutput{
			Tag:    tag,
			Fanout: fanoutOf[T],
			NewWriter: func(e *graph.Edge, p *network.ResultPartition, sub int, flush bool) (any, error) {
				return side.newWriter(e, p, sub, flush)
			},
			HasCodec: func() bool { return side.codec != nil },
		})
		k = len(s.n.Sides)
	}
	side.side = k
	n := env.addNode(&graph.Node{Name: s.n.Name + " " + tag.id})
	connect(side, n)
	n.Instantiate = func(rc *graph.Subtask, out any) (any, task.Operator, error) {
		next, _ := out.(collector[T])
		if next == nil {
			next = discard[T]{}
		}
		o := &passOp[T]{opBase: base(rc), next: next}
		return o, o, nil
	}
	res := newStream[T](env, n)
	res.codec, res.timestamped = tag.codec, s.timestamped
	return res
}

// sideCollectors are the collectors of one operator subtask's side
// outputs, by tag.
type sideCollectors struct {
	tags  []any
	outs  []any // collector[T] of tags[i]'s T; nil where nobody reads
	owner *opBase
}

// newSideCollectors returns the side collectors of the subtask rc.
func newSideCollectors(rc *graph.Subtask) *sideCollectors {
	s := &sideCollectors{}
	for k, so := range rc.Node.Sides {
		if so.Tag == nil {
			continue
		}
		s.tags = append(s.tags, so.Tag)
		var out any
		if k < len(rc.Sides) {
			out = rc.Sides[k]
		}
		s.outs = append(s.outs, out)
	}
	return s
}

func (s *sideCollectors) of(tag any) any {
	for i, t := range s.tags {
		if t == tag {
			return s.outs[i]
		}
	}
	return nil
}
