package dashboard

import (
	"bytes"
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/google/pprof/profile"
)

// Flame graph bounds: the answer's size does not grow with the program.
const (
	// defaultFlameSeconds is a flame graph's profile length without
	// ?seconds=.
	defaultFlameSeconds = 5 * time.Second
	// flameMinShare drops frames with less than this share of the CPU
	// time (too narrow to draw).
	flameMinShare = 0.001
	// flameMaxDepth cuts deeper stacks.
	flameMaxDepth = 256
)

// FlameNode is a frame of a flame graph: a function, the CPU time (ns)
// spent in it and the functions it called on this stack, and those
// callees.
type FlameNode struct {
	Name     string       `json:"name"`
	Value    int64        `json:"value"`
	Children []*FlameNode `json:"children,omitempty"`

	index map[string]*FlameNode // children by name, while building
}

// FlameGraph is the JSON of GET /api/v1/flamegraph: a CPU profile of the
// process as a tree of frames from "root".
type FlameGraph struct {
	// Seconds is how long the profile ran; Samples how many stacks it
	// took; Dropped how many frames were too narrow to keep.
	Seconds float64    `json:"seconds"`
	Samples int        `json:"samples"`
	Dropped int        `json:"dropped"`
	Root    *FlameNode `json:"root"`
}

// flamegraph takes a CPU profile of the process for ?seconds= (default
// 5) and answers it as a flame graph: the profile in pprof's format,
// parsed with github.com/google/pprof/profile. One profile at a time, as
// /debug/pprof/profile (409 while another runs).
func (p *profiler) flamegraph(w http.ResponseWriter, r *http.Request) {
	d, ok := p.seconds(w, r, defaultFlameSeconds)
	if !ok {
		return
	}
	data, err := CPUProfile(r.Context(), d)
	if err != nil {
		profileError(w, err)
		return
	}
	writeFlameGraph(w, data, writeError)
}

// writeFlameGraph answers a CPU profile in pprof's format as a flame
// graph; fail answers an error.
func writeFlameGraph(w http.ResponseWriter, data []byte, fail func(http.ResponseWriter, int, string)) {
	g, err := flameGraphOf(data)
	if err != nil {
		fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, g)
}

// flameGraphOf builds the flame graph of a CPU profile in pprof's
// format.
func flameGraphOf(data []byte) (*FlameGraph, error) {
	prof, err := profile.Parse(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("dashboard: parsing the CPU profile: %w", err)
	}
	vi := -1
	for i, st := range prof.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			vi = i
		}
	}
	if vi < 0 {
		return nil, fmt.Errorf("dashboard: the profile has no cpu/nanoseconds samples (%d sample types)", len(prof.SampleType))
	}
	g := &FlameGraph{Seconds: time.Duration(prof.DurationNanos).Seconds(), Samples: len(prof.Sample),
		Root: &FlameNode{Name: "root"}}
	var frames []string
	for _, s := range prof.Sample {
		v := s.Value[vi]
		if v <= 0 {
			continue
		}
		// Root first: the locations are leaf first, and the lines of a
		// location (inlined calls) innermost first.
		frames = frames[:0]
		for i := len(s.Location) - 1; i >= 0; i-- {
			loc := s.Location[i]
			for k := len(loc.Line) - 1; k >= 0; k-- {
				if fn := loc.Line[k].Function; fn != nil {
					frames = append(frames, fn.Name)
				}
			}
			if len(loc.Line) == 0 {
				frames = append(frames, fmt.Sprintf("0x%x", loc.Address))
			}
		}
		n := g.Root
		n.Value += v
		for i, f := range frames {
			if i == flameMaxDepth {
				break
			}
			n = n.child(f)
			n.Value += v
		}
	}
	g.Dropped = g.Root.finish(int64(float64(g.Root.Value) * flameMinShare))
	return g, nil
}

func (n *FlameNode) child(name string) *FlameNode {
	if c := n.index[name]; c != nil {
		return c
	}
	if n.index == nil {
		n.index = map[string]*FlameNode{}
	}
	c := &FlameNode{Name: name}
	n.index[name] = c
	n.Children = append(n.Children, c)
	return c
}

// finish drops the callees below floor, orders the others by time (the
// largest first) and returns how many frames it dropped.
func (n *FlameNode) finish(floor int64) int {
	n.index = nil
	dropped := 0
	kept := n.Children[:0]
	for _, c := range n.Children {
		if c.Value < floor {
			dropped += c.count()
			continue
		}
		kept = append(kept, c)
	}
	n.Children = kept
	slices.SortFunc(n.Children, func(a, b *FlameNode) int {
		return cmp.Or(cmp.Compare(b.Value, a.Value), cmp.Compare(a.Name, b.Name))
	})
	for _, c := range n.Children {
		dropped += c.finish(floor)
	}
	return dropped
}

// count is the frames in n's tree.
func (n *FlameNode) count() int {
	c := 1
	for _, x := range n.Children {
		c += x.count()
	}
	return c
}
