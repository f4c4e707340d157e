package barrier

import (
	"fmt"
	"strings"
)

// pullGate is the test harness's input gate for the handlers that take
// unaligned checkpoints (docs/barrier-scenarios.md, "pull gate"): per
// channel FIFOs that hand an item to the operator only when it polls,
// priority barriers (Unaligner) or announced in-band barriers
// (TimeoutAligner), blocks at a barrier, a manual clock and timers. It is
// the handler's UnalignedController, and it plays the part the real input
// channels will: the per-channel recorder that decides, at each data
// buffer's arrival, whether it goes into a pending checkpoint's channel
// state (recording), stopping at that checkpoint's barrier.
type pullGate struct {
	h        UnalignedHandler
	priority bool // checkpoint barriers are priority events, handled on arrival
	// router: h is a Router, and savepoint barriers may arrive (always
	// in band, never announced).
	router bool
	// pending holds the unaligned checkpoints whose channel state was
	// started and is neither complete nor aborted (the Router asks).
	pending map[CheckpointID]bool

	queues [][]pullItem // waiting items per channel, in arrival order
	// A blocked channel holds the items that arrived after blockAt[ch]
	// (the arrival number of the barrier it is blocked at).
	blocked []bool
	blockAt []int
	// The barrier ch delivered last (taken, overtaken or priority): its
	// arrival number and id.
	lastSeq []int
	lastID  []CheckpointID
	// recording[ch] is the checkpoint whose channel state takes every data
	// buffer arriving on ch; zero if none.
	recording []CheckpointID

	clock  int64
	timers []int64 // deadlines scheduled and not fired
	seq    int     // arrival counter
	out    []string
}

type pullItem struct {
	kind      itemKind
	ch        ChannelIndex
	id        CheckpointID
	ts        int64
	seq       int
	announced bool
	savepoint bool
}

func newPullGate(n int, priority bool) *pullGate {
	return &pullGate{
		priority:  priority,
		queues:    make([][]pullItem, n),
		blocked:   make([]bool, n),
		blockAt:   make([]int, n),
		lastSeq:   make([]int, n),
		lastID:    make([]CheckpointID, n),
		recording: make([]CheckpointID, n),
		pending:   map[CheckpointID]bool{},
	}
}

func (g *pullGate) barrier(it pullItem) Barrier {
	b := Barrier{ID: it.id, Timestamp: it.ts, Options: Options{Alignment: AlignedWithTimeout}}
	switch {
	case it.savepoint:
		b.Options = Options{Kind: Savepoint, Alignment: Aligned}
	case g.priority:
		b.Options.Alignment = Unaligned
	}
	return b
}

func (g *pullGate) held(it pullItem) bool {
	return g.blocked[it.ch] && it.seq > g.blockAt[it.ch]
}

// stopRecording ends the recording of checkpoint id (and older ones).
func (g *pullGate) stopRecording(id CheckpointID) {
	for ch, r := range g.recording {
		if r != 0 && r <= id {
			g.recording[ch] = 0
		}
	}
	for p := range g.pending {
		if p <= id {
			delete(g.pending, p)
		}
	}
}

// ChannelStatePending implements RouterController.
func (g *pullGate) ChannelStatePending(id CheckpointID) bool { return g.pending[id] }

// BlockChannel implements Controller: ch is blocked at the barrier it
// delivered last.
func (g *pullGate) BlockChannel(ch ChannelIndex) {
	g.blocked[ch], g.blockAt[ch] = true, g.lastSeq[ch]
}

func (g *pullGate) ResumeAllChannels() { clear(g.blocked) }

func (g *pullGate) TriggerCheckpoint(b Barrier) {
	if b.Options.Kind == Savepoint {
		g.out = append(g.out, fmt.Sprintf("trigger id=%d savepoint", b.ID))
		return
	}
	g.out = append(g.out, fmt.Sprintf("trigger id=%d", b.ID))
	if b.Options.Alignment == Unaligned {
		g.pending[b.ID] = true
	}
}

func (g *pullGate) AbortCheckpoint(id CheckpointID, _ AbortReason) {
	g.out = append(g.out, fmt.Sprintf("abort id=%d", id))
	g.stopRecording(id)
}

// PersistChannel implements UnalignedController: the data queued on ch
// ahead of barrier id if that barrier reached ch, else all queued data
// and every data buffer arriving until it does.
func (g *pullGate) PersistChannel(ch ChannelIndex, id CheckpointID) {
	bound := -1
	for _, it := range g.queues[ch] {
		if it.kind == itemBarrier && it.id == id {
			bound = it.seq
			break
		}
	}
	if bound < 0 && g.lastID[ch] == id {
		bound = g.lastSeq[ch]
	}
	for _, it := range g.queues[ch] {
		if it.kind == itemData && (bound < 0 || it.seq < bound) {
			g.out = append(g.out, fmt.Sprintf("persist ch=%d", ch))
		}
	}
	if bound < 0 {
		g.recording[ch] = id
	}
}

func (g *pullGate) ChannelStateComplete(id CheckpointID) {
	g.out = append(g.out, fmt.Sprintf("done id=%d", id))
	g.stopRecording(id)
}

// PrioritizeBarrier implements UnalignedController: the first barrier
// waiting on ch, which must be the announced barrier id, leaves the queue.
func (g *pullGate) PrioritizeBarrier(ch ChannelIndex, id CheckpointID) {
	q := g.queues[ch]
	for i, it := range q {
		if it.kind != itemBarrier {
			continue
		}
		if it.id != id || !it.announced {
			panic(fmt.Sprintf("harness: PrioritizeBarrier(%d, %d), but the first barrier waiting there is %+v", ch, id, it))
		}
		g.lastSeq[ch], g.lastID[ch] = it.seq, it.id
		g.queues[ch] = append(q[:i:i], q[i+1:]...)
		return
	}
	panic(fmt.Sprintf("harness: PrioritizeBarrier(%d, %d) with no barrier waiting there", ch, id))
}

func (g *pullGate) SwitchToUnaligned(id CheckpointID) {
	g.out = append(g.out, fmt.Sprintf("switch id=%d", id))
}

func (g *pullGate) ScheduleAlignmentTimer(_ CheckpointID, deadline int64) {
	g.timers = append(g.timers, deadline)
}

// arrive handles one command's item, arriving with timestamp ts (for a
// barrier), and returns the command's output.
func (g *pullGate) arrive(it item, ts int64) string {
	g.seq++
	p := pullItem{kind: it.kind, ch: it.ch, id: it.id, ts: ts, seq: g.seq, savepoint: it.savepoint}
	// A savepoint's barrier is aligned: it queues, and no announcement
	// precedes it.
	p.announced = p.savepoint
	switch {
	case p.kind == itemData:
		if g.recording[p.ch] != 0 {
			g.out = append(g.out, fmt.Sprintf("persist ch=%d", p.ch))
		}
	case p.kind == itemBarrier:
		if g.recording[p.ch] == p.id {
			g.recording[p.ch] = 0 // the channel's barrier ends its in-flight data
		}
		if g.priority && !p.savepoint {
			g.lastSeq[p.ch], g.lastID[p.ch] = p.seq, p.id
			g.h.ProcessPriorityBarrier(p.ch, g.barrier(p))
			g.settle()
			return g.flush()
		}
	}
	g.queues[p.ch] = append(g.queues[p.ch], p)
	g.settle()
	return g.flush()
}

// poll hands the earliest-arrived available item to the operator.
func (g *pullGate) poll() string {
	g.pollOne()
	return g.flush()
}

// drain polls until no item is available.
func (g *pullGate) drain() string {
	for g.pollOne() {
	}
	return g.flush()
}

// advance moves the clock forward by ms.
func (g *pullGate) advance(ms int64) string {
	g.clock += ms
	g.settle()
	return g.flush()
}

// abort is the task's own abort of checkpoint id (not a scenario command).
func (g *pullGate) abort(id CheckpointID) string {
	g.h.Abort(id)
	g.stopRecording(id)
	g.settle()
	return g.flush()
}

func (g *pullGate) pollOne() bool {
	next := -1
	for ch, q := range g.queues {
		if len(q) > 0 && !g.held(q[0]) && (next < 0 || q[0].seq < g.queues[next][0].seq) {
			next = ch
		}
	}
	if next < 0 {
		return false
	}
	it := g.queues[next][0]
	g.queues[next] = g.queues[next][1:]
	switch it.kind {
	case itemData:
		g.out = append(g.out, fmt.Sprintf("deliver ch=%d", it.ch))
	case itemBarrier:
		if !it.announced {
			panic(fmt.Sprintf("harness: the operator reached barrier %+v before its announcement", it))
		}
		g.lastSeq[it.ch], g.lastID[it.ch] = it.seq, it.id
		g.h.ProcessBarrier(it.ch, g.barrier(it))
	case itemCancel:
		g.h.ProcessCancel(it.ch, it.id)
	case itemEnd:
		g.recording[it.ch] = 0
		g.h.ProcessEndOfPartition(it.ch)
	}
	g.settle()
	return true
}

// settle announces the announceable barriers, earliest-arrived first, and
// fires the due timers, until neither is left.
func (g *pullGate) settle() {
	for {
		if !g.priority {
			best, bestIdx := -1, 0
			for ch, q := range g.queues {
				for i, it := range q {
					if it.kind != itemBarrier {
						continue
					}
					// A savepoint's barrier is never announced, and
					// nothing behind it is until it is taken.
					// Only the first barrier waiting on a channel.
					if !it.announced && !g.held(it) && (best < 0 || it.seq < g.queues[best][bestIdx].seq) {
						best, bestIdx = ch, i
					}
					break
				}
			}
			if best >= 0 {
				it := &g.queues[best][bestIdx]
				it.announced = true
				g.h.ProcessAnnouncement(it.ch, g.barrier(*it))
				continue
			}
		}
		due := false
		kept := g.timers[:0]
		for _, at := range g.timers {
			if at <= g.clock {
				due = true
			} else {
				kept = append(kept, at)
			}
		}
		g.timers = kept
		if !due {
			return
		}
		g.h.Tick(g.clock)
	}
}

// flush returns (and forgets) the output since the last flush.
func (g *pullGate) flush() string {
	defer func() { g.out = g.out[:0] }()
	if len(g.out) == 0 {
		return "ok\n"
	}
	return strings.Join(g.out, "\n") + "\n"
}
