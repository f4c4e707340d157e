package graph

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/state"
)

// job builds nodes from a compact description: each entry "name[:par]
// [<-input[/part]]", in order; part is f (forward, default), r
// (rebalance), h (hash) or b (broadcast).
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
			from, part, _ := strings.Cut(strings.TrimSpace(in), "/")
			p := map[string]network.Partitioning{"": network.Forward, "f": network.Forward, "r": network.Rebalance,
				"h": network.Hash, "b": network.Broadcast}[part]
			src := byName[from]
			require.NotNil(t, src, "unknown input %q", from)
			e := &Edge{From: src, To: n, Partitioning: p}
			n.Input = e
			src.Outputs = append(src.Outputs, e)
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
		if v.Input != nil {
			s += "<-" + g.VertexOf(v.Input.From).Name + "/" + v.Input.Partitioning.String()
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
	src2 := &Node{UID: "s2", Name: "s2", Source: true, Input: &Edge{From: src}}
	_, err = Build([]*Node{src, src2}, Config{Parallelism: 1, MaxParallelism: 1})
	require.ErrorContains(t, err, "source s2 has an input")
}

func TestProducersAndSubpartitions(t *testing.T) {
	cfg := Config{Parallelism: 1, MaxParallelism: 8, Chaining: true}
	g, err := Build(job(t, "src:3", "fwd:3<-src", "re:2<-fwd/r"), cfg)
	require.NoError(t, err)
	require.Len(t, g.Vertices, 2, "src and fwd chain")
	re := g.Vertices[1].Input
	require.Equal(t, 2, g.Subpartitions(re))
	prods, subs := g.Producers(re, 1)
	require.Equal(t, []int{0, 1, 2}, prods)
	require.Equal(t, []int{1, 1, 1}, subs)

	cfg.Chaining = false
	g, err = Build(job(t, "a:3", "b:3<-a"), cfg)
	require.NoError(t, err)
	fwd := g.Vertices[1].Input
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
	from, to := g.EdgeName(g.Vertices[1].Input)
	require.Equal(t, [2]string{"src", "sum"}, [2]string{from, to})
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
