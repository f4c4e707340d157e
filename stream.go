package weir

import (
	"context"
	"encoding/binary"
	"fmt"
	"iter"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/jobmaster"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// Environment holds a job under construction: its settings and its
// dataflow graph. Build streams from it, then call Execute. An Environment
// runs one job; it is not safe for concurrent use while building.
type Environment struct {
	cfg    config
	nodes  []*graph.Node
	checks []func() error // see check
	// runChecks: see CheckBeforeRun.
	runChecks []func(context.Context) error
	final     *jobmaster.FinalCommits // two-phase-commit sinks' end-of-job commits
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

// fail records an error that Execute reports.
func (e *Environment) fail(err error) { e.cfg.errs = append(e.cfg.errs, err) }

// check adds a check that Execute runs once the job is built (the
// operators named as they end up).
func (e *Environment) check(fn func() error) { e.checks = append(e.checks, fn) }

// addNode adds n to the job. Without a Kind, its kind is the name it has
// now: the constant name its constructor gave it ("map", "reduce"), never
// one the user gave (a constructor that takes the user's name, a source's,
// sets Kind: see the kind constants). Keyed operators and sources keep
// state. Its operator ID is its UID, or generated from its place in the
// topology when the graph is built.
func (e *Environment) addNode(n *graph.Node) *graph.Node {
	n.ID = len(e.nodes)
	if n.Kind == "" {
		n.Kind = n.Name
	}
	n.Stateful = n.Stateful || n.Keyed || n.Source
	e.nodes = append(e.nodes, n)
	return n
}

// Stream is a stream of values of type T: the output of a source or a
// transformation. Build further transformations on it with the package's
// functions (Map, Filter, KeyBy, …).
type Stream[T any] struct {
	env   *Environment
	n     *graph.Node
	codec codec.Codec[T]
	// partitioning for the next edge (Rebalance/Broadcast), or forward.
	part    network.Partitioning
	partSet bool
	// timestamped streams carry an event timestamp with every value
	// across task boundaries (AssignTimestamps and what follows it).
	timestamped bool
	// side is the side output of n that the stream is (0: its main
	// output).
	side int
	// union holds the streams a union unites (n is nil then).
	union []*Stream[T]
	// process marks the output of a process function, which may have
	// side outputs (SideOutput).
	process bool
}

func newStream[T any](env *Environment, n *graph.Node) *Stream[T] {
	s := &Stream[T]{env: env, n: n, codec: defaultCodec[T]()}
	s.bindOutput()
	return s
}

// bindOutput installs the typed closures that build this node's output
// side.
func (s *Stream[T]) bindOutput() {
	n := s.n
	n.Fanout = fanoutOf[T]
	n.HasCodec = func() bool { return s.codec != nil }
	n.Type = typeName[T]()
	n.NewWriter = s.newWriter
	n.ProbeOutput = probeCollector[T]
}

// fanoutOf combines collectors of T.
func fanoutOf[T any](outs []any) any {
	cs := make([]collector[T], len(outs))
	for i, o := range outs {
		cs[i] = o.(collector[T])
	}
	if len(cs) == 1 {
		return cs[0]
	}
	return &fanout[T]{outs: cs}
}

// newWriter makes the collector that serializes values of s into
// partition p of edge e.
func (s *Stream[T]) newWriter(e *graph.Edge, p *network.ResultPartition, subtask int, flushAlways bool) (any, error) {
	var keyHash func(T) uint64
	if e.KeyHash != nil {
		keyHash = e.KeyHash.(func() func(T) uint64)() // each writer its own scratch
	}
	if s.timestamped {
		return newStampedOut(s.codec, keyHash, e, p, subtask, s.env.cfg.maxParallelism, flushAlways)
	}
	cfg := network.WriterConfig[T]{Partitioning: e.Partitioning, Append: s.codec.Append, KeyHash: keyHash,
		Subtask: subtask, MaxParallelism: s.env.cfg.maxParallelism, KeyGroupPrefix: keyGroupPrefix(keyHash != nil, p)}
	w, err := network.NewRecordWriter(p, cfg)
	if err != nil {
		return nil, err
	}
	return &networkOut[T]{w: w, p: p, flush: flushAlways}, nil
}

// newStampedOut makes the writer of a timestamped stream: each record is
// its timestamp, then its value.
func newStampedOut[T any](c codec.Codec[T], keyHash func(T) uint64, e *graph.Edge, p *network.ResultPartition, subtask, maxPar int, flushAlways bool) (any, error) {
	cfg := network.WriterConfig[stamped[T]]{Partitioning: e.Partitioning, Subtask: subtask, MaxParallelism: maxPar,
		Append: func(dst []byte, sv stamped[T]) []byte {
			dst = binary.BigEndian.AppendUint64(dst, uint64(sv.ts))
			return c.Append(dst, sv.v)
		}}
	if keyHash != nil {
		cfg.KeyHash = func(sv stamped[T]) uint64 { return keyHash(sv.v) }
		cfg.KeyGroupPrefix = keyGroupPrefix(true, p)
	}
	w, err := network.NewRecordWriter(p, cfg)
	if err != nil {
		return nil, err
	}
	return &stampedOut[T]{w: w, p: p, flush: flushAlways}, nil
}

// Name sets the name of the operator that produces s (for logs, metrics and
// errors) and returns s.
func (s *Stream[T]) Name(name string) *Stream[T] {
	if s.notOperator("Name") {
		return s
	}
	s.n.Name = name
	return s
}

// notOperator reports (and records for Execute) that s, a union, has no
// operator for what setting asks.
func (s *Stream[T]) notOperator(setting string) bool {
	if s.union == nil {
		return false
	}
	s.env.fail(fmt.Errorf("weir: %s of a union: a union is not an operator; set it on the united streams or on their consumer", setting))
	return true
}

// UID sets the stable ID under which the producing operator's state is
// stored in checkpoints and savepoints. Without one, the ID is generated
// from the operator's place in the job's topology, which changes when
// operators are added or removed on its paths: set a UID on every stateful
// operator of a job that is to be upgraded through savepoints (see the
// README's savepoint section).
func (s *Stream[T]) UID(id string) *Stream[T] {
	if s.notOperator("UID") {
		return s
	}
	s.n.UID = id
	return s
}

// Parallelism sets the producing operator's parallelism.
func (s *Stream[T]) Parallelism(p int) *Stream[T] {
	if s.notOperator("Parallelism") {
		return s
	}
	if p < 1 {
		s.env.cfg.errs = append(s.env.cfg.errs, fmt.Errorf("weir: operator %s: parallelism %d must be at least 1", s.n.Name, p))
	}
	s.n.Parallelism = p
	return s
}

// WithCodec sets how values of s are serialized when they cross a task
// boundary. Built-in types (integers, floats, strings, byte slices, bools)
// have codecs already.
func (s *Stream[T]) WithCodec(c codec.Codec[T]) *Stream[T] {
	s.codec = c
	for _, p := range s.union {
		p.codec = c
	}
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

// connect adds node to as the consumer of s on its input 0.
func connect[T any](s *Stream[T], to *graph.Node) { connectInput(s, to, 0, nil) }

// connectInput adds the edges that feed input `input` of node `to` with
// the values of s: every edge of the job graph is made here. A union has
// one edge per stream it unites; s's partitioning (Rebalance, Broadcast)
// applies to each, else each stream's own, else forward. With keyHash
// (a factory: each writer gets its own scratch space) the edges are
// keyed: hash-partitioned, their records carry their key group to a
// consumer with several subtasks (keyGroupPrefix), and its decoder hands
// the group to the keyed operator.
func connectInput[T any](s *Stream[T], to *graph.Node, input int, keyHash func() func(T) uint64) {
	for _, p := range s.parts() {
		e := &graph.Edge{From: p.n, To: to, Input: input, Side: p.side, Partitioning: network.Forward}
		switch {
		case keyHash != nil:
			e.Partitioning, e.KeyHash = network.Hash, keyHash
		case s.partSet:
			e.Partitioning = s.part
		case p.partSet:
			e.Partitioning = p.part
		}
		e.Decoder = decoderFor(p)
		if keyHash != nil {
			e.Decoder = keyedDecoderFor(p)
		}
		e.ProbeInput = probeCollector[T]
		graph.Connect(e)
	}
}

// parts returns the streams s unites (s itself unless it is a union).
func (s *Stream[T]) parts() []*Stream[T] {
	if s.union != nil {
		return s.union
	}
	return []*Stream[T]{s}
}

// keyGroupPrefix reports whether a writer into p puts key groups before
// records: on a keyed edge to several consumers (graph.Edge.KeyHash).
func keyGroupPrefix(keyed bool, p *network.ResultPartition) bool {
	return keyed && p.NumSubpartitions() > 1
}

// keyedDecoderFor returns the decoder of a keyed edge carrying s: records
// preceded by their key group when the keyed consumer has several
// subtasks.
func keyedDecoderFor[T any](s *Stream[T]) func(in any, sub *graph.Subtask) task.RecordProcessor {
	return func(in any, sub *graph.Subtask) task.RecordProcessor {
		if sub.Parallelism == 1 {
			return decoderFor(s)(in, sub)
		}
		next := in.(collector[T])
		kn, _ := in.(groupCollector[T])
		return newKeyedHead(s.codec, s.timestamped, next, kn,
			keygroup.RangeFor(sub.MaxParallelism, sub.Parallelism, sub.Index))
	}
}

// decoderFor returns the closure that turns a collector[T] into a record
// processor decoding T with c.
func decoderFor[T any](s *Stream[T]) func(in any, sub *graph.Subtask) task.RecordProcessor {
	return func(in any, _ *graph.Subtask) task.RecordProcessor {
		if s.timestamped {
			return &stampedHead[T]{c: s.codec, next: in.(collector[T]), pk: prefetcherOf[T](in)}
		}
		return &decodeHead[T]{c: s.codec, next: in.(collector[T]), pk: prefetcherOf[T](in)}
	}
}

// decodeHead decodes serialized records and pushes them into a chain.
type decodeHead[T any] struct {
	c    codec.Codec[T]
	next collector[T]
	pk   keyPrefetch[T] // next's, if it is a keyed operator that prefetches
}

// Prefetch implements task.Prefetcher.
func (d *decodeHead[T]) Prefetch(records iter.Seq[[]byte]) error {
	return prefetchRecords(d.pk, records, d)
}

func (d *decodeHead[T]) decodeKeyed(rec []byte) (T, int, bool) {
	v, err := d.c.Decode(rec)
	return v, -1, err == nil
}

func (d *decodeHead[T]) ProcessRecord(rec []byte) error {
	v, err := d.c.Decode(rec)
	if err != nil {
		return fmt.Errorf("decoding record: %w", err)
	}
	return d.next.collect(v, eventtime.NoTimestamp)
}

// stampedHead decodes records of a timestamped stream: an 8-byte
// big-endian event timestamp, then the value.
type stampedHead[T any] struct {
	c    codec.Codec[T]
	next collector[T]
	pk   keyPrefetch[T] // as decodeHead's
}

// Prefetch implements task.Prefetcher.
func (d *stampedHead[T]) Prefetch(records iter.Seq[[]byte]) error {
	return prefetchRecords(d.pk, records, d)
}

func (d *stampedHead[T]) decodeKeyed(rec []byte) (v T, _ int, _ bool) {
	if len(rec) < 8 {
		return v, -1, false
	}
	v, err := d.c.Decode(rec[8:])
	return v, -1, err == nil
}

func (d *stampedHead[T]) ProcessRecord(rec []byte) error {
	if len(rec) < 8 {
		return fmt.Errorf("decoding record: %d bytes, too short for its timestamp", len(rec))
	}
	v, err := d.c.Decode(rec[8:])
	if err != nil {
		return fmt.Errorf("decoding record: %w", err)
	}
	return d.next.collect(v, int64(binary.BigEndian.Uint64(rec)))
}

// keyedHead decodes the records of a keyed edge: the key group, then the
// timestamp if the stream has them, then the value. The key group goes to
// the keyed operator with the value when it takes it (groupCollector).
type keyedHead[T any] struct {
	c       codec.Codec[T]
	stamped bool
	next    collector[T]
	kn      groupCollector[T] // next, if it takes key groups
	pk      keyPrefetch[T]    // as decodeHead's
	// The subtask's key groups: rng, and as start and length for one
	// comparison per record.
	rng   keygroup.Range
	start int
	n     uint
}

func newKeyedHead[T any](c codec.Codec[T], stamped bool, next collector[T], kn groupCollector[T], rng keygroup.Range) *keyedHead[T] {
	return &keyedHead[T]{c: c, stamped: stamped, next: next, kn: kn, pk: prefetcherOf[T](next), rng: rng, start: rng.Start, n: uint(rng.Len())}
}

// Prefetch implements task.Prefetcher.
func (d *keyedHead[T]) Prefetch(records iter.Seq[[]byte]) error {
	return prefetchRecords(d.pk, records, d)
}

func (d *keyedHead[T]) decodeKeyed(rec []byte) (v T, _ int, _ bool) {
	g, rest, ok := network.KeyGroupOf(rec)
	if !ok || uint(g-d.start) >= d.n {
		return v, -1, false
	}
	if d.stamped {
		if len(rest) < 8 {
			return v, -1, false
		}
		rest = rest[8:]
	}
	v, err := d.c.Decode(rest)
	return v, g, err == nil
}

// ProcessRecord decodes rec and hands it on. A key group outside the
// subtask's key groups (a record routed to the wrong subtask, or
// corrupt) fails with a *state.KeyGroupError: checked here, where the
// group enters, so that the keyed state below never sees one.
func (d *keyedHead[T]) ProcessRecord(rec []byte) error {
	g, rest, ok := network.KeyGroupOf(rec)
	if !ok {
		return fmt.Errorf("decoding record: no key group before it (%d bytes)", len(rec))
	}
	if uint(g-d.start) >= d.n {
		return fmt.Errorf("decoding record: %w", &state.KeyGroupError{Group: g, Range: d.rng})
	}
	ts := eventtime.NoTimestamp
	if d.stamped {
		if len(rest) < 8 {
			return fmt.Errorf("decoding record: %d bytes after its key group, too short for its timestamp", len(rest))
		}
		ts, rest = int64(binary.BigEndian.Uint64(rest)), rest[8:]
	}
	v, err := d.c.Decode(rest)
	if err != nil {
		return fmt.Errorf("decoding record: %w", err)
	}
	if d.kn != nil {
		return d.kn.collectInGroup(v, ts, g)
	}
	return d.next.collect(v, ts)
}

// collector receives the values of a chain step, each with its event
// timestamp (eventtime.NoTimestamp when the stream has none).
type collector[T any] interface {
	collect(v T, ts int64) error
}

// groupCollector is a keyed operator's collector that also takes a value
// with the key group of its key, which the producer computed, so that it
// need not hash the key again.
type groupCollector[T any] interface {
	collectInGroup(v T, ts int64, group int) error
}

type fanout[T any] struct{ outs []collector[T] }

func (f *fanout[T]) collect(v T, ts int64) error {
	for _, o := range f.outs {
		if err := o.collect(v, ts); err != nil {
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

func (o *networkOut[T]) collect(v T, _ int64) error {
	if err := o.w.Emit(v); err != nil {
		return err
	}
	if o.flush {
		o.p.Flush()
	}
	return nil
}

// stamped is a value with its event timestamp, as a timestamped stream
// serializes it.
type stamped[T any] struct {
	ts int64
	v  T
}

// stampedOut serializes a timestamped chain's output into a partition.
type stampedOut[T any] struct {
	w     *network.RecordWriter[stamped[T]]
	p     *network.ResultPartition
	flush bool
}

func (o *stampedOut[T]) collect(v T, ts int64) error {
	if err := o.w.Emit(stamped[T]{ts: ts, v: v}); err != nil {
		return err
	}
	if o.flush {
		o.p.Flush()
	}
	return nil
}
