package graph

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/network"
)

// ids builds a job without UIDs from specs "label=kind[:par] [<-label[/part],…]"
// (one input per label after the arrow)
// (label= optional: the kind; "#uid" after the kind sets a UID) and returns
// each label's generated operator ID.
func ids(t *testing.T, cfg Config, specs ...string) map[string]string {
	t.Helper()
	byLabel := map[string]*Node{}
	var nodes []*Node
	var labels []string
	for i, s := range specs {
		head, in, hasIn := strings.Cut(s, "<-")
		label, kind, ok := strings.Cut(strings.TrimSpace(head), "=")
		if !ok {
			kind = label
		}
		kind, par, _ := strings.Cut(kind, ":")
		kind, uid, _ := strings.Cut(kind, "#")
		n := &Node{ID: i, Kind: kind, Name: label, UID: uid, Source: !hasIn}
		if par != "" {
			n.Parallelism = int(par[0] - '0')
		}
		if hasIn {
			ins := strings.Split(strings.TrimSpace(in), ",")
			if len(ins) > 1 {
				n.NumInputs = len(ins)
			}
			for k, in := range ins {
				from, part, _ := strings.Cut(in, "/")
				src := byLabel[from]
				require.NotNil(t, src, "unknown input %q", from)
				e := &Edge{From: src, To: n, Input: k}
				if part == "h" {
					e.Partitioning, n.Keyed = network.Hash, true
				}
				Connect(e)
			}
		}
		byLabel[label] = n
		nodes = append(nodes, n)
		labels = append(labels, label)
	}
	if cfg.Parallelism == 0 {
		cfg.Parallelism = 2
	}
	if cfg.MaxParallelism == 0 {
		cfg.MaxParallelism = 128
	}
	g, err := Build(nodes, cfg)
	require.NoError(t, err)
	out := map[string]string{}
	for i, n := range g.Nodes {
		out[labels[i]] = n.UID
		require.Equal(t, n.UID != uidOf(specs[i]), n.GeneratedUID)
		require.Equal(t, uidOf(specs[i]), nodes[i].UID, "Build leaves the declared node as it was")
	}
	// Building the same nodes again (a second Execute) gives the same IDs.
	g, err = Build(nodes, cfg)
	require.NoError(t, err)
	for i, n := range g.Nodes {
		require.Equal(t, out[labels[i]], n.UID)
	}
	return out
}

func uidOf(spec string) string {
	head, _, _ := strings.Cut(spec, "<-")
	_, uid, _ := strings.Cut(strings.TrimSpace(head), "#")
	uid, _, _ = strings.Cut(uid, ":")
	return uid
}

// Generated IDs stay with their operator across what does not change the
// topology: parallelism, chaining, names.
func TestGeneratedIDsIgnoreParallelismChainingAndNames(t *testing.T) {
	job := []string{"src=source", "sum=reduce<-src/h", "sink=sink<-sum"}
	base := ids(t, Config{Chaining: true}, job...)
	require.Len(t, base["sum"], 32)
	require.Equal(t, base, ids(t, Config{Chaining: true}, job...), "deterministic")
	require.Equal(t, base, ids(t, Config{}, job...), "chaining off")
	require.Equal(t, base, ids(t, Config{Chaining: true, Parallelism: 3}, "src=source", "sum=reduce:1<-src/h", "sink=sink:4<-sum"), "parallelism")
	renamed := ids(t, Config{Chaining: true}, "a=source", "b=reduce<-a/h", "c=sink<-b")
	require.Equal(t, []string{base["src"], base["sum"], base["sink"]}, []string{renamed["a"], renamed["b"], renamed["c"]}, "renamed")
}

// Inserting an operator on a path changes the generated IDs of the
// operators on that path, and the inserted one takes no one's ID, even
// next to operators of its own kind; operators on other paths keep theirs.
func TestGeneratedIDsChangeOnTheirPathsOnly(t *testing.T) {
	cfg := Config{Chaining: true}
	v1 := ids(t, cfg, "src=source", "a=reduce<-src/h", "b=reduce<-a/h", "c=reduce<-b/h", "sink=sink<-c",
		"other=map<-src", "osink=sink<-other")
	for name, v2 := range map[string]map[string]string{
		"a reduce before the first": ids(t, cfg, "src=source", "new=reduce<-src/h", "a=reduce<-new/h", "b=reduce<-a/h", "c=reduce<-b/h", "sink=sink<-c",
			"other=map<-src", "osink=sink<-other"),
		"a reduce in the middle": ids(t, cfg, "src=source", "a=reduce<-src/h", "new=reduce<-a/h", "b=reduce<-new/h", "c=reduce<-b/h", "sink=sink<-c",
			"other=map<-src", "osink=sink<-other"),
		"a map before the sink": ids(t, cfg, "src=source", "a=reduce<-src/h", "b=reduce<-a/h", "c=reduce<-b/h", "new=map<-c", "sink=sink<-new",
			"other=map<-src", "osink=sink<-other"),
		"a reduce removed": ids(t, cfg, "src=source", "a=reduce<-src/h", "c=reduce<-a/h", "sink=sink<-c",
			"other=map<-src", "osink=sink<-other"),
	} {
		old := map[string]string{}
		for label, id := range v1 {
			old[id] = label
		}
		for label, id := range v2 {
			if label == "other" || label == "osink" {
				require.Equal(t, v1[label], id, "%s: %s is on another path", name, label)
				continue
			}
			if label == "src" {
				continue // its downstream changed too: checked below
			}
			require.Empty(t, old[id], "%s: %s took the ID of %s", name, label, old[id])
		}
		require.NotEqual(t, v1["src"], v2["src"], name)
	}
	// A second output changes the source's ID, not the first branch's
	// position.
	v2 := ids(t, cfg, "src=source", "a=reduce<-src/h", "b=reduce<-a/h", "c=reduce<-b/h", "sink=sink<-c",
		"other=map<-src", "osink=sink<-other", "third=map<-src")
	require.Equal(t, v1["a"], v2["a"])
	require.Equal(t, v1["other"], v2["other"])
}

// Siblings of the same kind and identical sources get different IDs, by
// their position.
func TestGeneratedIDsTellSiblingsApart(t *testing.T) {
	got := ids(t, Config{Chaining: true}, "s1=source", "s2=source", "m1=map<-s1", "m2=map<-s1", "m3=map<-s2")
	seen := map[string]string{}
	for label, id := range got {
		require.Empty(t, seen[id], "%s and %s", label, seen[id])
		seen[id] = label
	}
}

// A UID anchors the generated IDs: what lies beyond it does not change the
// IDs on this side of it.
func TestUIDsAnchorGeneratedIDs(t *testing.T) {
	cfg := Config{Chaining: true}
	v1 := ids(t, cfg, "src=source", "sum=reduce#sum<-src/h", "m=map<-sum", "sink=sink<-m")
	require.Equal(t, "sum", v1["sum"])
	v2 := ids(t, cfg, "src=source", "f=filter<-src", "sum=reduce#sum<-f/h", "m=map<-sum", "sink=sink<-m")
	require.Equal(t, v1["m"], v2["m"], "upstream of the UID changed")
	require.Equal(t, v1["sink"], v2["sink"])
	v3 := ids(t, cfg, "src=source", "sum=reduce#sum<-src/h", "m=map<-sum", "m2=map<-m", "sink=sink<-m2")
	require.Equal(t, v1["src"], v3["src"], "downstream of the UID changed")
	require.NotEqual(t, v1["m"], v3["m"])
}

// The inputs of a node with several are hashed in input order: swapping
// them changes the IDs.
func TestGeneratedIDsFollowInputOrder(t *testing.T) {
	cfg := Config{Chaining: true}
	v1 := ids(t, cfg, "a=source", "b=source", "ma=map<-a", "mb=map<-b", "co=co-process<-ma,mb", "sink=sink<-co")
	v2 := ids(t, cfg, "a=source", "b=source", "ma=map<-a", "mb=map<-b", "co=co-process<-mb,ma", "sink=sink<-co")
	require.NotEqual(t, v1["co"], v2["co"])
	require.NotEqual(t, v1["sink"], v2["sink"])
	require.Equal(t, ids(t, cfg, "a=source", "b=source", "ma=map<-a", "mb=map<-b", "co=co-process<-ma,mb", "sink=sink<-co"), v1)
}
