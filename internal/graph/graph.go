// Package graph is a job's dataflow graph: the transformations a program
// built (nodes) connected by the exchanges between them (edges), and the
// same graph after chaining, as the runtime deploys it (vertices).
//
// A Node is one source, operator or sink as the user API built it. Its
// typed parts (how it instantiates one subtask, decodes its input, encodes
// its output) are closures the API sets; this package only looks at the
// shape of the graph. Build validates the nodes and chains them: a node
// joins its input's vertex when the exchange between them is a forward
// one-to-one exchange, so records pass between them by function call
// instead of through the network stack. Each Vertex runs as one task per
// subtask; its ID, derived from its head node's UID, names its tasks' state
// in checkpoints.
//
// The package is pure: building and inspecting a graph has no side
// effects.
package graph

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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
	Input       *Edge   // nil for sources
	Outputs     []*Edge // consumers

	// The typed parts, set by the user API; the "any" values are typed
	// collectors of the API, opaque to the runtime.

	// Instantiate builds one subtask's operator. out is the collector of
	// the node's output (the next chained node's input, or a fan-out of
	// it and network writers; nil for a sink). It returns the node's input
	// collector (a task.Source for a source) and the task-level operator.
	Instantiate func(sub *Subtask, out any) (in any, op task.Operator, err error)
	// Decoder wraps the node's input collector in a record processor that
	// decodes serialized records of its input type (chain heads only),
	// for the node's subtask sub.
	Decoder func(in any, sub *Subtask) task.RecordProcessor
	// Fanout combines several collectors of the node's output type.
	Fanout func(outs []any) any
	// NewWriter makes a collector that serializes the node's output into
	// partition p of edge e, for producer subtask index.
	NewWriter func(e *Edge, p *network.ResultPartition, subtask int, flushAlways bool) (any, error)
	// HasCodec reports whether the node's output type can be serialized.
	HasCodec func() bool
	// Sides are the node's side outputs (a window's late data): side k
	// is Sides[k-1]. Consumers of a side output are never chained.
	Sides []SideOutput

	// ProbeInput wraps the input collector of a node with an input in one
	// that calls probe before each value, and ProbeOutput wraps a
	// collector of the node's output type likewise (a nil out: one that
	// drops values). The runtime calls them at deploy time, and only for
	// a job that runs under a test harness (weir.WithTestHarness).
	ProbeInput  func(in any, probe func() error) any
	ProbeOutput func(out any, probe func() error) any
}

// SideOutput is the typed part of one side output of a node: its values
// have another type than the node's main output.
type SideOutput struct {
	Fanout    func(outs []any) any
	NewWriter func(e *Edge, p *network.ResultPartition, subtask int, flushAlways bool) (any, error)
	HasCodec  func() bool
}

// Edge connects a producer node to a consumer node.
type Edge struct {
	From, To     *Node
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
	Input       *Edge   // the head's input edge (nil for a source chain)
	Outputs     []*Edge // edges leaving the chain
}

// IsSource reports whether the vertex's chain starts with a source.
func (v *Vertex) IsSource() bool { return v.Input == nil }

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
		switch {
		case n.Source && n.Input != nil:
			return nil, fmt.Errorf("weir: source %s has an input", n.Name)
		case !n.Source && n.Input == nil:
			return nil, fmt.Errorf("weir: operator %s has no input", n.Name)
		case par(n) > cfg.MaxParallelism:
			return nil, fmt.Errorf("weir: operator %s: parallelism %d above max parallelism %d", n.Name, par(n), cfg.MaxParallelism)
		case n.Input != nil && (n.Input.Side < 0 || n.Input.Side > len(n.Input.From.Sides)):
			return nil, fmt.Errorf("weir: operator %s reads side output %d of %s, which has %d", n.Name, n.Input.Side, n.Input.From.Name, len(n.Input.From.Sides))
		}
		if other := uids[n.UID]; other != nil {
			return nil, fmt.Errorf("weir: operators %s and %s have the same UID %q", other.Name, n.Name, n.UID)
		}
		uids[n.UID] = n
		if in := n.Input; in != nil && in.Partitioning == network.Forward && par(in.From) != par(n) {
			in.Partitioning = network.Rebalance
		}
	}
	for _, n := range nodes {
		in := n.Input
		if in != nil && cfg.Chaining && in.Partitioning == network.Forward && in.Side == 0 && len(in.From.Outputs) == 1 {
			v := g.byNode[in.From]
			v.Nodes = append(v.Nodes, n)
			g.byNode[n] = v
			continue
		}
		v := &Vertex{Nodes: []*Node{n}, Parallelism: par(n), Input: in}
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
				hasCodec := n.HasCodec
				if out.Side > 0 {
					hasCodec = n.Sides[out.Side-1].HasCodec
				}
				if hasCodec != nil && !hasCodec() {
					return nil, fmt.Errorf("weir: the output of operator %s crosses a task boundary but its type has no codec: call WithCodec on its stream", n.Name)
				}
				v.Outputs = append(v.Outputs, out)
			}
		}
	}
	return g, nil
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
// vertices (a vertex has exactly one input edge, and vertex IDs derive
// from the operators' UIDs).
func (g *JobGraph) EdgeName(e *Edge) (from, to string) {
	return g.byNode[e.From].ID, g.byNode[e.To].ID
}

// Upstream returns the upstream tasks of every task that has an input:
// the producer subtasks its input channels read.
func (g *JobGraph) Upstream() map[state.TaskKey][]state.TaskKey {
	up := map[state.TaskKey][]state.TaskKey{}
	for _, v := range g.Vertices {
		if v.Input == nil {
			continue
		}
		prod := g.VertexOf(v.Input.From)
		for i := range v.Parallelism {
			ps, _ := g.Producers(v.Input, i)
			for _, j := range ps {
				up[v.TaskKey(i)] = append(up[v.TaskKey(i)], prod.TaskKey(j))
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
		if in := v.Input; in != nil {
			fmt.Fprintf(h, " in=%q/%d", g.byNode[in.From].ID, in.Partitioning)
		}
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
