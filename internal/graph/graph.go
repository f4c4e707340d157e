// Package graph is a job's dataflow graph: the transformations a program
// built (nodes) connected by the exchanges between them (edges), and the
// same graph after chaining, as the runtime deploys it (vertices).
//
// A Node is one source, operator or sink as the user API built it. Its
// typed parts (how it instantiates one subtask, decodes its input, encodes
// its output) are closures the API sets; this package only looks at the
// shape of the graph. The graph is a DAG: a node may have several inputs
// (a co-process function's two, numbered 0 and 1), and an input may be
// fed by several edges (a union); a stream may feed a node twice, or feed
// it and a stream derived from it. Build validates the nodes and chains
// them: a node with one input joins its input's vertex when the exchange
// between them is a forward one-to-one exchange, so records pass between
// them by function call instead of through the network stack; a node with
// several inputs, or several edges, always heads its own vertex. Each
// Vertex runs as one task per subtask; its ID, derived from its head
// node's UID, names its tasks' state in checkpoints.
//
// The package is pure: building and inspecting a graph has no side
// effects.
package graph

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// Node is one transformation: a source, an operator or a sink.
type Node struct {
	ID          int    // position in the job, in the order nodes were added
	UID         string // stable operator ID: its state is stored under it
	Name        string
	Parallelism int // 0: the job's default
	Keyed       bool
	Source      bool
	// Inputs are the edges the node reads, each with its input index
	// (Edge.Input): 0..NumInputs-1, every input fed by at least one edge
	// (several for a union). Nil for sources. Add them with Connect.
	Inputs  []*Edge
	Outputs []*Edge // consumers

	// NumInputs is the number of inputs of an operator with several (a
	// two-input operator's 2, even if both read the same stream); 0
	// means one, or none for a source.
	NumInputs int

	// The typed parts, set by the user API; the "any" values are typed
	// collectors of the API, opaque to the runtime.

	// Instantiate builds one subtask's operator. out is the collector of
	// the node's output (the next chained node's input, or a fan-out of
	// it and network writers; nil for a sink). It returns the node's input
	// collector (a task.Source for a source; for a node with several
	// inputs a []any, the collector of input i at i) and the task-level
	// operator.
	Instantiate func(sub *Subtask, out any) (in any, op task.Operator, err error)
	// Fanout combines several collectors of the node's output type.
	Fanout func(outs []any) any
	// NewWriter makes a collector that serializes the node's output into
	// partition p of edge e, for producer subtask index.
	NewWriter func(e *Edge, p *network.ResultPartition, subtask int, flushAlways bool) (any, error)
	// HasCodec reports whether the node's output type can be serialized.
	HasCodec func() bool
	// Type is the Go type of the node's output, for errors.
	Type string
	// Sides are the node's side outputs (a window's late data): side k
	// is Sides[k-1]. Consumers of a side output are never chained.
	Sides []SideOutput

	// ProbeOutput wraps a collector of the node's output type in one
	// that calls probe before each value (a nil out: one that drops
	// values); Edge.ProbeInput does the same for an input. The runtime
	// calls them at deploy time, and only for a job that runs under a test
	// harness (weir.WithTestHarness).
	ProbeOutput func(out any, probe func() error) any
}

// inputs returns the number of inputs of n: 0 for a source.
func (n *Node) inputs() int {
	if n.NumInputs > 0 {
		return n.NumInputs
	}
	if len(n.Inputs) > 0 {
		return 1
	}
	return 0
}

// MultiInput reports whether n has several inputs, or several edges into
// one: the head of its own vertex, whose task reads them through one gate.
func (n *Node) MultiInput() bool { return n.inputs() > 1 || len(n.Inputs) > 1 }

// Connect adds e as an input edge of e.To (input e.Input) and an output
// edge of e.From: the one place where edges join the graph.
func Connect(e *Edge) {
	e.To.Inputs = append(e.To.Inputs, e)
	e.From.Outputs = append(e.From.Outputs, e)
}

// SideOutput is the typed part of one side output of a node: its values
// have another type than the node's main output.
type SideOutput struct {
	// Tag is the API's name of the side output (opaque here).
	Tag       any
	Fanout    func(outs []any) any
	NewWriter func(e *Edge, p *network.ResultPartition, subtask int, flushAlways bool) (any, error)
	HasCodec  func() bool
	Type      string // the Go type of the side output's values
}

// Edge connects a producer node to one input of a consumer node.
type Edge struct {
	From, To *Node
	// Input is the consumer's input the edge feeds (0 for an operator with
	// one input).
	Input        int
	Partitioning network.Partitioning
	// Side is 0 for the producer's main output, k ≥ 1 for its side output
	// k.
	Side int
	// KeyHash makes the key hash function of hash partitioning: a
	// func() func(T) uint64 of the producer's output type (a factory, so
	// that each writer gets its own scratch space). An edge with a
	// KeyHash is a keyed one. When its consumer has several subtasks, its
	// records carry their key group before them
	// (network.WriterConfig.KeyGroupPrefix): the producer hashed the key
	// to route the record, and the consumer's decoder hands the key group
	// to the keyed operator, which so does not hash the key again. With one
	// consumer, the producer does not hash and the operator does.
	KeyHash any

	// Decoder wraps the consumer's collector of input Input (chain heads
	// only) in a record processor that decodes the edge's serialized
	// records, for the consumer's subtask sub.
	Decoder func(in any, sub *Subtask) task.RecordProcessor
	// ProbeInput wraps the consumer's collector of input Input in one
	// that calls probe before each value (see Node.ProbeOutput).
	ProbeInput func(in any, probe func() error) any
}

// Subtask is what a node's Instantiate gets for one parallel instance.
type Subtask struct {
	Node           *Node
	Index          int // 0..Parallelism-1
	Parallelism    int
	MaxParallelism int
	// Sides holds the collectors of the node's side outputs (Sides[k-1]
	// for side k; nil where a side output has no consumer).
	Sides []any
	// Running is the chain's mark of the operator running (one per task).
	Running *task.CurrentOperator
}

// Vertex is a chain of nodes that runs as one task per subtask.
type Vertex struct {
	ID          string  // the head node's UID: names the vertex's tasks
	Name        string  // the nodes' names joined by " -> "
	Nodes       []*Node // head first; linear
	Parallelism int
	// Inputs are the head's input edges (nil for a source chain), in the
	// order the head got them: the task's gate has their channels in this
	// order.
	Inputs  []*Edge
	Outputs []*Edge // edges leaving the chain
	// NumInputs is the head's number of inputs (0 for a source chain).
	NumInputs int
}

// IsSource reports whether the vertex's chain starts with a source.
func (v *Vertex) IsSource() bool { return len(v.Inputs) == 0 }

// TaskKey names subtask i of v.
func (v *Vertex) TaskKey(i int) state.TaskKey { return state.TaskKey{Vertex: v.ID, Subtask: i} }

// TaskName names subtask i of v in logs and errors, as Flink does:
// "map -> filter (2/4)".
func (v *Vertex) TaskName(i int) string { return fmt.Sprintf("%s (%d/%d)", v.Name, i+1, v.Parallelism) }

// Config is what chaining needs from the job's settings.
type Config struct {
	Parallelism    int  // default parallelism of every node
	MaxParallelism int  // number of key groups
	Chaining       bool // chain forward edges
}

// JobGraph is a job's graph after chaining.
type JobGraph struct {
	Vertices       []*Vertex
	MaxParallelism int
	byNode         map[*Node]*Vertex
}

// VertexOf returns the vertex that runs n.
func (g *JobGraph) VertexOf(n *Node) *Vertex { return g.byNode[n] }

// Build validates nodes (in the order they were added, which is
// topological: a node's input was added before it) and chains them into
// vertices. It resolves each node's parallelism and turns a forward edge
// between nodes of different parallelism into a rebalance, as Flink does.
func Build(nodes []*Node, cfg Config) (*JobGraph, error) {
	if len(nodes) == 0 {
		return nil, errors.New("weir: the job has no operators")
	}
	g := &JobGraph{MaxParallelism: cfg.MaxParallelism, byNode: make(map[*Node]*Vertex, len(nodes))}
	par := func(n *Node) int {
		if n.Parallelism > 0 {
			return n.Parallelism
		}
		return cfg.Parallelism
	}
	uids := make(map[string]*Node, len(nodes))
	for _, n := range nodes {
		if err := check(n, par(n), cfg.MaxParallelism); err != nil {
			return nil, err
		}
		if other := uids[n.UID]; other != nil {
			return nil, fmt.Errorf("weir: operators %s and %s have the same UID %q", other.Name, n.Name, n.UID)
		}
		uids[n.UID] = n
		for _, in := range n.Inputs {
			if in.Partitioning == network.Forward && par(in.From) != par(n) {
				in.Partitioning = network.Rebalance
			}
		}
	}
	for _, n := range nodes {
		if !n.MultiInput() && len(n.Inputs) == 1 {
			in := n.Inputs[0]
			if cfg.Chaining && in.Partitioning == network.Forward && in.Side == 0 && len(in.From.Outputs) == 1 {
				v := g.byNode[in.From]
				v.Nodes = append(v.Nodes, n)
				g.byNode[n] = v
				continue
			}
		}
		v := &Vertex{Nodes: []*Node{n}, Parallelism: par(n), Inputs: n.Inputs, NumInputs: n.inputs()}
		g.Vertices = append(g.Vertices, v)
		g.byNode[n] = v
	}
	for _, v := range g.Vertices {
		names := make([]string, len(v.Nodes))
		for i, n := range v.Nodes {
			names[i] = n.Name
		}
		v.Name = strings.Join(names, " -> ")
		v.ID = v.Nodes[0].UID
		for _, n := range v.Nodes {
			for _, out := range n.Outputs {
				if g.byNode[out.To] == v {
					continue
				}
				hasCodec, typ := n.HasCodec, n.Type
				if out.Side > 0 {
					hasCodec, typ = n.Sides[out.Side-1].HasCodec, n.Sides[out.Side-1].Type
				}
				if hasCodec != nil && !hasCodec() {
					return nil, fmt.Errorf("weir: operator %s: its output crosses a task boundary, so it is serialized, but its type %s has no codec: "+
						"call WithCodec on the stream it returns, with a codec.Codec[%s] (codec.Struct2, Struct3 or Struct4 for a struct; codec.JSON[%s]() for any type)",
						n.Name, orUnknown(typ), orUnknown(typ), orUnknown(typ))
				}
				v.Outputs = append(v.Outputs, out)
			}
		}
	}
	return g, nil
}

// check validates one node's shape: a source has no input, an operator
// has inputs 0..NumInputs-1, each fed by an edge to it, from a side
// output its producer has.
func check(n *Node, par, maxPar int) error {
	switch {
	case n.Source && len(n.Inputs) > 0:
		return fmt.Errorf("weir: source %s has an input", n.Name)
	case !n.Source && len(n.Inputs) == 0:
		return fmt.Errorf("weir: operator %s has no input", n.Name)
	case par > maxPar:
		return fmt.Errorf("weir: operator %s: parallelism %d above max parallelism %d", n.Name, par, maxPar)
	}
	fed := make([]bool, n.inputs())
	for _, in := range n.Inputs {
		switch {
		case in.To != n || in.From == nil:
			return fmt.Errorf("weir: operator %s has an input edge of another operator", n.Name)
		case in.Input < 0 || in.Input >= len(fed):
			return fmt.Errorf("weir: operator %s has %d inputs, not an input %d", n.Name, len(fed), in.Input)
		case in.Side < 0 || in.Side > len(in.From.Sides):
			return fmt.Errorf("weir: operator %s reads side output %d of %s, which has %d", n.Name, in.Side, in.From.Name, len(in.From.Sides))
		}
		fed[in.Input] = true
	}
	for i, ok := range fed {
		if !ok {
			return fmt.Errorf("weir: operator %s: nothing feeds its input %d", n.Name, i)
		}
	}
	return nil
}

// Subpartitions is the number of subpartitions a producer subtask's
// partition for edge e has: one per consumer subtask, or one for a
// forward edge (its consumer subtask i reads producer subtask i).
func (g *JobGraph) Subpartitions(e *Edge) int {
	if e.Partitioning == network.Forward {
		return 1
	}
	return g.byNode[e.To].Parallelism
}

// Producers lists, for consumer subtask i of edge e, the producer subtasks
// it reads and the subpartition it reads from each.
func (g *JobGraph) Producers(e *Edge, i int) (producers, subpartitions []int) {
	if e.Partitioning == network.Forward {
		return []int{i}, []int{0}
	}
	n := g.byNode[e.From].Parallelism
	producers, subpartitions = make([]int, n), make([]int, n)
	for j := range n {
		producers[j], subpartitions[j] = j, i
	}
	return producers, subpartitions
}

// EdgeName is an edge's stable identity: its producer and consumer
// vertices (vertex IDs derive from the operators' UIDs), the consumer's
// input it feeds and its position among the consumer's input edges (a
// stream may feed a node twice, even one input twice). The name of a
// chain head's only edge is "from/to".
func (g *JobGraph) EdgeName(e *Edge) string {
	from, to := g.byNode[e.From].ID, g.byNode[e.To].ID
	if !e.To.MultiInput() {
		return fmt.Sprintf("%q/%q", from, to)
	}
	return fmt.Sprintf("%q/%q/%d.%d", from, to, e.Input, slices.Index(e.To.Inputs, e))
}

// Upstream returns the upstream tasks of every task that has an input:
// the producer subtasks its input channels read, over all its inputs
// (a producer that feeds it twice is listed once).
func (g *JobGraph) Upstream() map[state.TaskKey][]state.TaskKey {
	up := map[state.TaskKey][]state.TaskKey{}
	for _, v := range g.Vertices {
		for _, in := range v.Inputs {
			prod := g.VertexOf(in.From)
			for i := range v.Parallelism {
				ps, _ := g.Producers(in, i)
				for _, j := range ps {
					if k := prod.TaskKey(j); !slices.Contains(up[v.TaskKey(i)], k) {
						up[v.TaskKey(i)] = append(up[v.TaskKey(i)], k)
					}
				}
			}
		}
	}
	return up
}

// TaskKeys lists every task of the graph, the sources apart.
func (g *JobGraph) TaskKeys() (sources, all []state.TaskKey) {
	for _, v := range g.Vertices {
		for i := range v.Parallelism {
			k := v.TaskKey(i)
			all = append(all, k)
			if v.IsSource() {
				sources = append(sources, k)
			}
		}
	}
	return sources, all
}

// Fingerprint identifies the graph's shape (vertices, names,
// parallelism, exchanges, key groups) and extra settings the caller adds
// (such as the checkpointing mode): processes that build different graphs
// must not run one job together.
func (g *JobGraph) Fingerprint(extra ...string) string {
	h := sha256.New()
	fmt.Fprintf(h, "maxp=%d\n", g.MaxParallelism)
	for _, x := range extra {
		fmt.Fprintf(h, "%q\n", x)
	}
	for _, v := range g.Vertices {
		fmt.Fprintf(h, "%q %q p=%d", v.ID, v.Name, v.Parallelism)
		for _, in := range v.Inputs {
			fmt.Fprintf(h, " in=%q/%d", g.byNode[in.From].ID, in.Partitioning)
			if v.NumInputs > 1 || in.Side > 0 {
				fmt.Fprintf(h, "/%d/%d", in.Input, in.Side)
			}
		}
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func orUnknown(typ string) string {
	if typ == "" {
		return "T"
	}
	return typ
}
