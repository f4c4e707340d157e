package weir

import (
	"fmt"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/task"
)

// Environment holds a job under construction: its settings and its
// dataflow graph. Build streams from it, then call Execute. An Environment
// runs one job; it is not safe for concurrent use while building.
type Environment struct {
	cfg   config
	nodes []*node
	final *finalCommits // two-phase-commit sinks' end-of-job commits
}

// NewEnvironment returns an environment with the given options. Invalid
// options are reported by Execute.
func NewEnvironment(opts ...Option) *Environment {
	e := &Environment{cfg: defaultConfig()}
	for _, o := range opts {
		o.apply(&e.cfg)
	}
	return e
}

// node is one transformation of the graph: a source, an operator or a sink.
type node struct {
	id          int
	uid         string // stable operator ID (state is stored under it)
	name        string
	parallelism int // 0 = environment default
	keyed       bool
	isSource    bool
	input       *edge   // nil for sources
	outputs     []*edge // consumers
	chainable   bool    // may chain to its input

	// instantiate builds one subtask's operator. out is a collector[Out]
	// (or nil for sinks). It returns the operator's input: a collector[In]
	// (or a task.Source for sources) and the task-level operator.
	instantiate func(rc *runtimeContext, out any) (in any, op task.Operator, err error)
	// decoder turns the node's input collector into a record processor
	// that decodes serialized records of its input type.
	decoder func(in any) task.RecordProcessor
	// fanout combines several collectors of the node's output type.
	fanout func(outs []any) any
	// newWriter makes a collector that serializes the node's output into a
	// partition (for an edge e).
	newWriter func(e *edge, p *network.ResultPartition, subtask int, flushAlways bool) (any, error)
	// hasCodec reports whether the output type can be serialized.
	hasCodec func() bool
}

// edge connects a producer node to a consumer node.
type edge struct {
	from, to     *node
	partitioning network.Partitioning
	// keyHash hashes a record's key (hash partitioning); typed as
	// func(T) uint64 of the producer's output type, stored as any.
	keyHash any
}

func (e *Environment) addNode(n *node) *node {
	n.id = len(e.nodes)
	if n.uid == "" {
		n.uid = fmt.Sprintf("%d-%s", n.id, n.name)
	}
	e.nodes = append(e.nodes, n)
	return n
}

// Stream is a stream of values of type T: the output of a source or a
// transformation. Build further transformations on it with the package's
// functions (Map, Filter, KeyBy, …).
type Stream[T any] struct {
	env   *Environment
	n     *node
	codec codec.Codec[T]
	// partitioning for the next edge (Rebalance/Broadcast), or forward.
	part    network.Partitioning
	partSet bool
}

func newStream[T any](env *Environment, n *node) *Stream[T] {
	s := &Stream[T]{env: env, n: n, codec: defaultCodec[T]()}
	s.bindOutput()
	return s
}

// bindOutput installs the typed closures that build this node's output
// side.
func (s *Stream[T]) bindOutput() {
	n := s.n
	n.fanout = func(outs []any) any {
		cs := make([]collector[T], len(outs))
		for i, o := range outs {
			cs[i] = o.(collector[T])
		}
		if len(cs) == 1 {
			return cs[0]
		}
		return &fanout[T]{outs: cs}
	}
	n.hasCodec = func() bool { return s.codec != nil }
	n.newWriter = func(e *edge, p *network.ResultPartition, subtask int, flushAlways bool) (any, error) {
		c := s.codec
		cfg := network.WriterConfig[T]{Partitioning: e.partitioning, Append: c.Append, Subtask: subtask, MaxParallelism: s.env.cfg.maxParallelism}
		if e.keyHash != nil {
			cfg.KeyHash = e.keyHash.(func() func(T) uint64)() // each writer its own scratch
		}
		w, err := network.NewRecordWriter(p, cfg)
		if err != nil {
			return nil, err
		}
		return &networkOut[T]{w: w, p: p, flush: flushAlways}, nil
	}
}

// Name sets the name of the operator that produces s (for logs, metrics and
// errors) and returns s.
func (s *Stream[T]) Name(name string) *Stream[T] {
	s.n.name = name
	return s
}

// UID sets the stable ID under which the producing operator's state is
// stored in checkpoints. Set it on stateful operators of long-lived jobs so
// that state survives changes to the graph.
func (s *Stream[T]) UID(id string) *Stream[T] {
	s.n.uid = id
	return s
}

// Parallelism sets the producing operator's parallelism.
func (s *Stream[T]) Parallelism(p int) *Stream[T] {
	if p < 1 {
		s.env.cfg.errs = append(s.env.cfg.errs, fmt.Errorf("weir: operator %s: parallelism %d must be at least 1", s.n.name, p))
	}
	s.n.parallelism = p
	return s
}

// WithCodec sets how values of s are serialized when they cross a task
// boundary. Built-in types (integers, floats, strings, byte slices, bools)
// have codecs already.
func (s *Stream[T]) WithCodec(c codec.Codec[T]) *Stream[T] {
	s.codec = c
	return s
}

// Rebalance returns s distributed round robin to the next operator's
// subtasks.
func (s *Stream[T]) Rebalance() *Stream[T] {
	c := *s
	c.part, c.partSet = network.Rebalance, true
	return &c
}

// Broadcast returns s sent whole to every subtask of the next operator.
func (s *Stream[T]) Broadcast() *Stream[T] {
	c := *s
	c.part, c.partSet = network.Broadcast, true
	return &c
}

// connect adds node to as a consumer of s.
func connect[T any](s *Stream[T], to *node, part network.Partitioning, keyHash func(T) uint64) {
	e := &edge{from: s.n, to: to, partitioning: part}
	if keyHash != nil {
		e.keyHash = keyHash
	}
	if s.partSet {
		e.partitioning = s.part
	}
	to.input = e
	to.chainable = e.partitioning == network.Forward
	s.n.outputs = append(s.n.outputs, e)
}

// decoderFor returns the closure that turns a collector[T] into a record
// processor decoding T with c.
func decoderFor[T any](s *Stream[T]) func(in any) task.RecordProcessor {
	return func(in any) task.RecordProcessor {
		return &decodeHead[T]{c: s.codec, next: in.(collector[T])}
	}
}

// decodeHead decodes serialized records and pushes them into a chain.
type decodeHead[T any] struct {
	c    codec.Codec[T]
	next collector[T]
}

func (d *decodeHead[T]) ProcessRecord(rec []byte) error {
	v, err := d.c.Decode(rec)
	if err != nil {
		return fmt.Errorf("decoding record: %w", err)
	}
	return d.next.collect(v)
}

// collector receives the values of a chain step.
type collector[T any] interface {
	collect(v T) error
}

type fanout[T any] struct{ outs []collector[T] }

func (f *fanout[T]) collect(v T) error {
	for _, o := range f.outs {
		if err := o.collect(v); err != nil {
			return err
		}
	}
	return nil
}

// networkOut serializes a chain's output into a partition.
type networkOut[T any] struct {
	w     *network.RecordWriter[T]
	p     *network.ResultPartition
	flush bool
}

func (o *networkOut[T]) collect(v T) error {
	if err := o.w.Emit(v); err != nil {
		return err
	}
	if o.flush {
		o.p.Flush()
	}
	return nil
}
