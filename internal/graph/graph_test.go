package graph

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/state"
)

// job builds nodes from a compact description: each entry "name[:par]
// [<-input[/part][,input[/part]]...]", in order; part is f (forward,
// default), r (rebalance), h (hash) or b (broadcast). Several inputs make
// a node with that many inputs (0, 1, …); "a+b" feeds one input from both
// a and b (a union).
func job(t *testing.T, specs ...string) []*Node {
	t.Helper()
	byName := map[string]*Node{}
	var nodes []*Node
	for i, s := range specs {
		head, in, hasIn := strings.Cut(s, "<-")
		name, par, _ := strings.Cut(strings.TrimSpace(head), ":")
		n := &Node{ID: i, UID: name, Name: name, Source: !hasIn, HasCodec: func() bool { return !strings.HasPrefix(name, "nocodec") }}
		if par != "" {
			n.Parallelism = int(par[0] - '0')
		}
		if hasIn {
			inputs := strings.Split(strings.TrimSpace(in), ",")
			if len(inputs) > 1 {
				n.NumInputs = len(inputs)
			}
			for k, input := range inputs {
				for _, one := range strings.Split(input, "+") {
					from, part, _ := strings.Cut(one, "/")
					p := map[string]network.Partitioning{"": network.Forward, "f": network.Forward, "r": network.Rebalance,
						"h": network.Hash, "b": network.Broadcast}[part]
					src := byName[from]
					require.NotNil(t, src, "unknown input %q", from)
					Connect(&Edge{From: src, To: n, Input: k, Partitioning: p})
				}
			}
		}
		byName[name] = n
		nodes = append(nodes, n)
	}
	return nodes
}

// shape renders a graph's vertices: "name(p)<-from/partitioning".
func shape(g *JobGraph) []string {
	var out []string
	for _, v := range g.Vertices {
		s := v.Name + "(" + string(rune('0'+v.Parallelism)) + ")"
		for k, in := range v.Inputs {
			sep := "<-"
			if k > 0 {
				sep = ","
			}
			s += sep + g.VertexOf(in.From).Name + "/" + in.Partitioning.String()
			if v.NumInputs > 1 {
				s += "#" + string(rune('0'+in.Input))
			}
		}
		out = append(out, s)
	}
	return out
}

func TestBuild(t *testing.T) {
	for _, tc := range []struct {
		name     string
		nodes    []string
		cfg      Config
		want     []string
		wantErr  string
		vertices int
	}{
		{name: "forward edges of equal parallelism chain",
			nodes: []string{"src", "map<-src", "sink<-map"},
			want:  []string{"src -> map -> sink(2)"}},
		{name: "chaining off: one vertex per node",
			nodes: []string{"src", "map<-src", "sink<-map"}, cfg: Config{Chaining: false},
			want: []string{"src(2)", "map(2)<-src/forward", "sink(2)<-map/forward"}},
		{name: "hash and rebalance break chains",
			nodes: []string{"src", "key<-src/h", "re<-key/r"},
			want:  []string{"src(2)", "key(2)<-src/hash", "re(2)<-key/rebalance"}},
		{name: "forward between different parallelism becomes rebalance",
			nodes: []string{"src:1", "map:3<-src"},
			want:  []string{"src(1)", "map(3)<-src/rebalance"}},
		{name: "a node with two consumers chains with neither",
			nodes: []string{"src", "a<-src", "b<-src"},
			want:  []string{"src(2)", "a(2)<-src/forward", "b(2)<-src/forward"}},
		{name: "parallelism above max parallelism",
			nodes: []string{"src:9"}, cfg: Config{MaxParallelism: 4}, wantErr: "parallelism 9 above max parallelism 4"},
		{name: "duplicate UID", nodes: []string{"src", "src<-src/r"}, wantErr: `same UID "src"`},
		{name: "no codec across a task boundary",
			nodes: []string{"nocodec", "x<-nocodec/r"}, wantErr: "has no codec"},
		{name: "a two-input head is never chained, not even to forward edges",
			nodes: []string{"a", "b", "co<-a,b", "map<-co"},
			want:  []string{"a(2)", "b(2)", "co -> map(2)<-a/forward#0,b/forward#1"}},
		{name: "a union input is never chained",
			nodes: []string{"a", "b", "u<-a+b"},
			want:  []string{"a(2)", "b(2)", "u(2)<-a/forward,b/forward"}},
		{name: "a stream connected to itself",
			nodes: []string{"a", "co<-a,a/r"},
			want:  []string{"a(2)", "co(2)<-a/forward#0,a/rebalance#1"}},
		{name: "a stream connected to one derived from it",
			nodes: []string{"a", "m<-a", "co<-a/h,m/b"},
			want:  []string{"a(2)", "m(2)<-a/forward", "co(2)<-a/hash#0,m/broadcast#1"}},
		{name: "inputs of different parallelism: forward becomes rebalance per edge",
			nodes: []string{"a:1", "b:3", "co:3<-a,b"},
			want:  []string{"a(1)", "b(3)", "co(3)<-a/rebalance#0,b/forward#1"}},
		{name: "no codec inside a chain is fine",
			nodes: []string{"src", "nocodec<-src", "x<-nocodec"},
			want:  []string{"src -> nocodec -> x(2)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if cfg.Parallelism == 0 {
				cfg.Parallelism = 2
			}
			if cfg.MaxParallelism == 0 {
				cfg.MaxParallelism = 128
			}
			if tc.name != "chaining off: one vertex per node" {
				cfg.Chaining = true
			}
			g, err := Build(job(t, tc.nodes...), cfg)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			if tc.want != nil {
				require.Equal(t, tc.want, shape(g))
			}
		})
	}
}

func TestBuildRejectsMalformedNodes(t *testing.T) {
	_, err := Build(nil, Config{})
	require.ErrorContains(t, err, "no operators")
	src := &Node{UID: "s", Name: "s", Source: true}
	op := &Node{UID: "o", Name: "o"}
	_, err = Build([]*Node{src, op}, Config{Parallelism: 1, MaxParallelism: 1})
	require.ErrorContains(t, err, "operator o has no input")
	src2 := &Node{UID: "s2", Name: "s2", Source: true}
	Connect(&Edge{From: src, To: src2})
	_, err = Build([]*Node{src, src2}, Config{Parallelism: 1, MaxParallelism: 1})
	require.ErrorContains(t, err, "source s2 has an input")
	two := &Node{UID: "two", Name: "two", NumInputs: 2}
	Connect(&Edge{From: src, To: two})
	_, err = Build([]*Node{src, two}, Config{Parallelism: 1, MaxParallelism: 1})
	require.ErrorContains(t, err, "nothing feeds its input 1")
	three := &Node{UID: "three", Name: "three"}
	Connect(&Edge{From: src, To: three, Input: 1})
	_, err = Build([]*Node{src, three}, Config{Parallelism: 1, MaxParallelism: 1})
	require.ErrorContains(t, err, "has 1 inputs, not an input 1")
}

// Edges into the same node, even from the same producer into the same
// input, have distinct names (and so distinct partitions); the upstream
// tasks of a two-input task are those of both its inputs, each once.
func TestMultiInputEdgeNamesAndUpstream(t *testing.T) {
	g, err := Build(job(t, "a:2", "b:1", "u:2<-a+a/r", "co:2<-a/h,b/r"), Config{Parallelism: 1, MaxParallelism: 8, Chaining: true})
	require.NoError(t, err)
	u, co := g.Vertices[2], g.Vertices[3]
	names := map[string]bool{}
	for _, v := range []*Vertex{u, co} {
		for _, e := range v.Inputs {
			names[g.EdgeName(e)] = true
		}
	}
	require.Len(t, names, 4)
	require.True(t, names[`"a"/"co"/0.0`], "%v", names)
	require.True(t, names[`"b"/"co"/1.1`], "%v", names)
	up := g.Upstream()
	require.ElementsMatch(t, []state.TaskKey{{Vertex: "a", Subtask: 0}, {Vertex: "a", Subtask: 1}}, up[u.TaskKey(1)])
	require.Equal(t, []state.TaskKey{{Vertex: "a", Subtask: 0}, {Vertex: "a", Subtask: 1}, {Vertex: "b", Subtask: 0}}, up[co.TaskKey(0)])
	// The fingerprint sees which input an edge feeds.
	swapped, err := Build(job(t, "a:2", "b:1", "u:2<-a+a/r", "co:2<-b/r,a/h"), Config{Parallelism: 1, MaxParallelism: 8, Chaining: true})
	require.NoError(t, err)
	require.NotEqual(t, g.Fingerprint(), swapped.Fingerprint())
}

func TestProducersAndSubpartitions(t *testing.T) {
	cfg := Config{Parallelism: 1, MaxParallelism: 8, Chaining: true}
	g, err := Build(job(t, "src:3", "fwd:3<-src", "re:2<-fwd/r"), cfg)
	require.NoError(t, err)
	require.Len(t, g.Vertices, 2, "src and fwd chain")
	re := g.Vertices[1].Inputs[0]
	require.Equal(t, 2, g.Subpartitions(re))
	prods, subs := g.Producers(re, 1)
	require.Equal(t, []int{0, 1, 2}, prods)
	require.Equal(t, []int{1, 1, 1}, subs)

	cfg.Chaining = false
	g, err = Build(job(t, "a:3", "b:3<-a"), cfg)
	require.NoError(t, err)
	fwd := g.Vertices[1].Inputs[0]
	require.Equal(t, network.Forward, fwd.Partitioning)
	require.Equal(t, 1, g.Subpartitions(fwd))
	prods, subs = g.Producers(fwd, 2)
	require.Equal(t, []int{2}, prods, "a forward consumer reads its own producer subtask")
	require.Equal(t, []int{0}, subs)
}

func TestTaskKeysAndNames(t *testing.T) {
	g, err := Build(job(t, "src:2", "sum:3<-src/h"), Config{Parallelism: 1, MaxParallelism: 8, Chaining: true})
	require.NoError(t, err)
	sources, all := g.TaskKeys()
	require.Equal(t, []state.TaskKey{{Vertex: "src", Subtask: 0}, {Vertex: "src", Subtask: 1}}, sources)
	require.Len(t, all, 5)
	require.Equal(t, "sum (3/3)", g.Vertices[1].TaskName(2))
	require.Equal(t, `"src"/"sum"`, g.EdgeName(g.Vertices[1].Inputs[0]))
}

// The fingerprint depends on the graph's shape and the extra settings,
// nothing else: two builds of the same job agree, any change differs.
func TestFingerprint(t *testing.T) {
	build := func(cfg Config, specs ...string) *JobGraph {
		g, err := Build(job(t, specs...), cfg)
		require.NoError(t, err)
		return g
	}
	cfg := Config{Parallelism: 2, MaxParallelism: 128, Chaining: true}
	base := build(cfg, "src", "sum<-src/h").Fingerprint("mode=0")
	require.Equal(t, base, build(cfg, "src", "sum<-src/h").Fingerprint("mode=0"))
	for name, other := range map[string]string{
		"parallelism":      build(Config{Parallelism: 3, MaxParallelism: 128, Chaining: true}, "src", "sum<-src/h").Fingerprint("mode=0"),
		"max parallelism":  build(Config{Parallelism: 2, MaxParallelism: 64, Chaining: true}, "src", "sum<-src/h").Fingerprint("mode=0"),
		"partitioning":     build(cfg, "src", "sum<-src/r").Fingerprint("mode=0"),
		"operator":         build(cfg, "src", "count<-src/h").Fingerprint("mode=0"),
		"extra setting":    build(cfg, "src", "sum<-src/h").Fingerprint("mode=1"),
		"chaining changed": build(Config{Parallelism: 2, MaxParallelism: 128}, "src", "map<-src", "sum<-map/h").Fingerprint("mode=0"),
	} {
		require.NotEqual(t, base, other, name)
	}
}

// TestBuildLeavesNodesAsDeclared checks that Build is pure: it resolves
// partitionings and generated IDs on its own copies, so the declared
// nodes keep their forward edge and their lack of a UID, and a second
// Build with another default parallelism, or after the program set a UID,
// decides afresh rather than from the first Build's decisions.
func TestBuildLeavesNodesAsDeclared(t *testing.T) {
	nodes := job(t, "src:3", "map<-src")
	nodes[1].UID = "" // generated
	g, err := Build(nodes, Config{Parallelism: 2, MaxParallelism: 8, Chaining: true})
	require.NoError(t, err)
	require.Equal(t, []string{"src(3)", "map(2)<-src/rebalance"}, shape(g))
	require.True(t, g.Nodes[1].GeneratedUID)
	require.Equal(t, network.Forward, nodes[1].Inputs[0].Partitioning, "the declared edge is still forward")
	require.Empty(t, nodes[1].UID, "the declared node has no UID")
	require.False(t, nodes[1].GeneratedUID)
	require.NotSame(t, nodes[1], g.Nodes[1])
	require.Same(t, g.Nodes[0], g.Nodes[1].Inputs[0].From, "the copies' edges join the copies")
	require.Same(t, g.Nodes[1].Inputs[0], g.Nodes[0].Outputs[0], "each edge copied once")

	g, err = Build(nodes, Config{Parallelism: 3, MaxParallelism: 8, Chaining: true})
	require.NoError(t, err)
	require.Equal(t, []string{"src -> map(3)"}, shape(g), "equal parallelism now: forward, chained")

	nodes[1].UID = "mine"
	g, err = Build(nodes, Config{Parallelism: 3, MaxParallelism: 8, Chaining: true})
	require.NoError(t, err)
	require.Equal(t, "mine", g.Nodes[1].UID, "a UID set after a Build is the operator's ID")
	require.False(t, g.Nodes[1].GeneratedUID)
}
