package barrier

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestScenarios runs every testdata/*.txt file through the real handlers,
// in the format of docs/barrier-scenarios.md: mode=aligned and mode=tracker
// with the eager gate model (gate), mode=unaligned and mode=aligned with
// timeout= with the pull gate model (pullGate).
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if filepath.Ext(path) != ".txt" {
			t.Skipf("%s is not a scenario file", path)
		}
		var (
			g  *gate     // eager model
			pg *pullGate // pull model
		)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "new" {
				g, pg = nil, nil
				name := stringArg(t, d, "mode")
				n := intArg(t, d, "channels")
				if name == "router" {
					cfg := Config{Alignment: Unaligned}
					if d.HasArg("timeout") {
						cfg = Config{Alignment: AlignedWithTimeout, AlignmentTimeout: time.Duration(intArg(t, d, "timeout")) * time.Millisecond}
					}
					pg = routerPullGate(t, d, cfg, n)
					return "ok\n"
				}
				if d.HasArg("timeout") {
					if name != "aligned" && name != "exactly-once" {
						d.Fatalf(t, "timeout= is only valid with mode=aligned, not %q", name)
					}
					timeout := time.Duration(intArg(t, d, "timeout")) * time.Millisecond
					pg = realPullGate(t, d, Config{Alignment: AlignedWithTimeout, AlignmentTimeout: timeout}, n)
					return "ok\n"
				}
				if name == "unaligned" {
					pg = realPullGate(t, d, Config{Alignment: Unaligned}, n)
					return "ok\n"
				}
				mode := map[string]Mode{
					"aligned": ExactlyOnce, "exactly-once": ExactlyOnce,
					"tracker": AtLeastOnce, "at-least-once": AtLeastOnce,
				}
				m, ok := mode[name]
				if !ok {
					d.Fatalf(t, "unknown mode %q (want aligned, tracker or unaligned)", name)
				}
				var err error
				if g, err = newGate(m, n); err != nil {
					d.Fatalf(t, "%v", err)
				}
				return "ok\n"
			}
			if g == nil && pg == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			switch d.Cmd {
			case "poll", "drain", "advance":
				if g != nil {
					// Everything that can be handed over already was,
					// and there is no timer.
					if d.Cmd == "advance" {
						intArg(t, d, "ms")
					}
					return "ok\n"
				}
				switch d.Cmd {
				case "poll":
					return pg.poll()
				case "drain":
					return pg.drain()
				}
				return pg.advance(int64(intArg(t, d, "ms")))
			case "abort":
				if pg == nil || !pg.router {
					d.Fatalf(t, "abort is a command of mode=router only")
				}
				return pg.abort(CheckpointID(intArg(t, d, "id")))
			}
			var numChannels int
			if g != nil {
				numChannels = len(g.queues)
			} else {
				numChannels = len(pg.queues)
			}
			ch := intArg(t, d, "ch")
			if ch < 0 || ch >= numChannels {
				d.Fatalf(t, "ch=%d outside 0..%d", ch, numChannels-1)
			}
			it := item{ch: ChannelIndex(ch)}
			switch d.Cmd {
			case "data":
				it.kind = itemData
			case "barrier":
				it.kind, it.id = itemBarrier, CheckpointID(intArg(t, d, "id"))
				if d.HasArg("savepoint") {
					if pg == nil || !pg.router {
						d.Fatalf(t, "savepoint barriers need mode=router")
					}
					it.savepoint = true
				}
			case "cancel":
				it.kind, it.id = itemCancel, CheckpointID(intArg(t, d, "id"))
			case "end":
				it.kind = itemEnd
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			if g != nil {
				return g.arrive(it) // ts= does not matter here
			}
			ts, hasTS := pg.clock, d.HasArg("ts")
			if hasTS {
				s := stringArg(t, d, "ts")
				var err error
				if ts, err = strconv.ParseInt(s, 10, 64); err != nil {
					d.Fatalf(t, "ts=%s: want an integer", s)
				}
			}
			return pg.arrive(it, ts)
		})
	})
}

// routerPullGate returns a pull gate in front of a real Router whose
// checkpoints go to the unaligned handler cfg selects.
func routerPullGate(t *testing.T, d *datadriven.TestData, cfg Config, n int) *pullGate {
	t.Helper()
	pg := newPullGate(n, cfg.Alignment == Unaligned)
	r, err := NewRouter(cfg, n, pg)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	pg.h, pg.router = r, true
	return pg
}

// realPullGate returns a pull gate in front of the real handler cfg
// selects.
func realPullGate(t *testing.T, d *datadriven.TestData, cfg Config, n int) *pullGate {
	t.Helper()
	pg := newPullGate(n, cfg.Alignment == Unaligned)
	h, err := NewWithConfig(cfg, n, pg)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	pg.h = h.(UnalignedHandler)
	return pg
}

func stringArg(t *testing.T, d *datadriven.TestData, key string) string {
	t.Helper()
	arg, ok := d.Arg(key)
	if !ok {
		d.Fatalf(t, "missing argument %s=", key)
	}
	return arg.SingleVal(t)
}

func intArg(t *testing.T, d *datadriven.TestData, key string) int {
	t.Helper()
	s := stringArg(t, d, key)
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		d.Fatalf(t, "%s=%s: want a non-negative integer", key, s)
	}
	return n
}

type itemKind uint8

const (
	itemData itemKind = iota
	itemBarrier
	itemCancel
	itemEnd
)

// item is one buffer or event arriving on an input channel.
type item struct {
	kind      itemKind
	ch        ChannelIndex
	id        CheckpointID
	seq       int  // arrival order
	savepoint bool // a savepoint's barrier (mode=router)
}

// gate is the test harness's input gate: per-channel FIFOs in front of a
// real handler, honouring its blocks and resumptions, and recording what
// reached the operator and what the handler decided. It is the Controller.
type gate struct {
	h       Handler
	queues  [][]item // waiting items per channel, oldest first
	blocked []bool
	seq     int
	out     []string
}

func newGate(m Mode, n int) (*gate, error) {
	g := &gate{queues: make([][]item, n), blocked: make([]bool, n)}
	h, err := New(m, n, g)
	if err != nil {
		return nil, err
	}
	g.h = h
	return g, nil
}

func (g *gate) BlockChannel(ch ChannelIndex) { g.blocked[ch] = true }
func (g *gate) ResumeAllChannels()           { clear(g.blocked) }
func (g *gate) TriggerCheckpoint(b Barrier) {
	g.out = append(g.out, fmt.Sprintf("trigger id=%d", b.ID))
}
func (g *gate) AbortCheckpoint(id CheckpointID, _ AbortReason) {
	g.out = append(g.out, fmt.Sprintf("abort id=%d", id))
}

// arrive handles one command's item and returns the command's output.
func (g *gate) arrive(it item) string {
	g.seq++
	it.seq = g.seq
	if g.blocked[it.ch] || len(g.queues[it.ch]) > 0 {
		g.queues[it.ch] = append(g.queues[it.ch], it)
	} else {
		g.handle(it)
	}
	return g.drain()
}

// drain lets the resumptions take effect: it hands over waiting items,
// earliest arrived first across the unblocked channels, until none is
// left. It returns (and forgets) the output since the last drain.
func (g *gate) drain() string {
	defer func() { g.out = g.out[:0] }()
	for {
		next := -1
		for ch, q := range g.queues {
			if !g.blocked[ch] && len(q) > 0 && (next < 0 || q[0].seq < g.queues[next][0].seq) {
				next = ch
			}
		}
		if next < 0 {
			break
		}
		it := g.queues[next][0]
		g.queues[next] = g.queues[next][1:]
		g.handle(it)
	}
	if len(g.out) == 0 {
		return "ok\n"
	}
	return strings.Join(g.out, "\n") + "\n"
}

func (g *gate) handle(it item) {
	switch it.kind {
	case itemData:
		g.out = append(g.out, fmt.Sprintf("deliver ch=%d", it.ch))
	case itemBarrier:
		g.h.ProcessBarrier(it.ch, Barrier{ID: it.id})
	case itemCancel:
		g.h.ProcessCancel(it.ch, it.id)
	case itemEnd:
		g.h.ProcessEndOfPartition(it.ch)
	}
}
