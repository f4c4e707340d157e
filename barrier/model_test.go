package barrier

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// The reference models below are written straight from the rules of
// docs/barrier-scenarios.md (plus Handler.Abort's documentation), as naively as
// possible: maps, linear scans, no reuse. TestRandomAgainstModel drives a
// real handler and its model with the same random inputs through the same
// gate and demands identical behaviour.

// refAligned models the aligned rules.
type refAligned struct {
	c         Controller
	open      map[ChannelIndex]bool
	cur       CheckpointID
	delivered map[ChannelIndex]bool
	aligning  bool
}

func newRefAligned(n int, c Controller) *refAligned {
	r := &refAligned{c: c, open: map[ChannelIndex]bool{}, delivered: map[ChannelIndex]bool{}}
	for ch := range n {
		r.open[ChannelIndex(ch)] = true
	}
	return r
}

func (r *refAligned) allOpenDelivered() bool {
	for ch := range r.open {
		if !r.delivered[ch] {
			return false
		}
	}
	return true
}

func (r *refAligned) ProcessBarrier(ch ChannelIndex, b Barrier) {
	n := b.ID
	switch {
	case n > r.cur:
		if r.aligning {
			r.c.AbortCheckpoint(r.cur, AbortSubsumed)
			r.c.ResumeAllChannels()
		}
		r.cur = n
		r.aligning = true
		r.delivered = map[ChannelIndex]bool{ch: true}
		r.c.BlockChannel(ch)
	case n == r.cur && r.aligning:
		r.delivered[ch] = true
		r.c.BlockChannel(ch)
	default:
		return
	}
	if r.allOpenDelivered() {
		r.c.TriggerCheckpoint(Barrier{ID: r.cur})
		r.aligning = false
		r.c.ResumeAllChannels()
	}
}

func (r *refAligned) ProcessCancel(ch ChannelIndex, n CheckpointID) {
	if n > r.cur || (n == r.cur && r.aligning) {
		if r.aligning && r.cur < n {
			r.c.AbortCheckpoint(r.cur, AbortSubsumed)
		}
		r.c.AbortCheckpoint(n, AbortCancelMarker)
		r.cur = n
		r.aligning = false
		r.c.ResumeAllChannels()
	}
}

func (r *refAligned) ProcessEndOfPartition(ch ChannelIndex) {
	delete(r.open, ch)
	if r.aligning && r.allOpenDelivered() {
		r.c.TriggerCheckpoint(Barrier{ID: r.cur})
		r.aligning = false
		r.c.ResumeAllChannels()
	}
}

func (r *refAligned) Abort(id CheckpointID) {
	if r.aligning && r.cur <= id {
		r.aligning = false
		r.c.ResumeAllChannels()
	}
	if id > r.cur {
		r.cur = id
	}
}

func (r *refAligned) LatestCheckpoint() CheckpointID { return r.cur }
func (r *refAligned) Aligning() bool                 { return r.aligning }

// refTracker models the tracker rules.
type refTracker struct {
	c       Controller
	open    int
	latest  CheckpointID
	pending []*refPending // oldest first
}

type refPending struct {
	id      CheckpointID
	seen    map[ChannelIndex]bool
	target  int
	aborted bool
}

func newRefTracker(n int, c Controller) *refTracker { return &refTracker{c: c, open: n} }

func (r *refTracker) indexOf(id CheckpointID) int {
	for i, p := range r.pending {
		if p.id == id {
			return i
		}
	}
	return -1
}

func (r *refTracker) ProcessBarrier(ch ChannelIndex, b Barrier) {
	n := b.ID
	i := r.indexOf(n)
	switch {
	case r.open == 1 && n > r.latest:
		r.pending = nil
		r.c.TriggerCheckpoint(b)
		r.latest = n
	case i >= 0:
		p := r.pending[i]
		p.seen[ch] = true
		if len(p.seen) >= p.target {
			r.pending = r.pending[i+1:]
			if !p.aborted {
				r.c.TriggerCheckpoint(b)
			}
		}
	case n > r.latest:
		r.latest = n
		r.pending = append(r.pending, &refPending{id: n, seen: map[ChannelIndex]bool{ch: true}, target: r.open})
		if len(r.pending) > 50 {
			r.pending = r.pending[1:]
		}
	}
}

func (r *refTracker) ProcessCancel(ch ChannelIndex, n CheckpointID) {
	var keep []*refPending
	for _, p := range r.pending {
		if p.id < n {
			if !p.aborted {
				r.c.AbortCheckpoint(p.id, AbortSubsumed)
			}
		} else {
			keep = append(keep, p)
		}
	}
	r.pending = keep
	if i := r.indexOf(n); i >= 0 {
		p := r.pending[i]
		if !p.aborted {
			r.c.AbortCheckpoint(n, AbortCancelMarker)
			p.aborted = true
		}
		p.seen[ch] = true
		if len(p.seen) >= p.target {
			r.pending = slices.Delete(r.pending, i, i+1)
		}
	} else if n > r.latest {
		r.c.AbortCheckpoint(n, AbortCancelMarker)
		r.latest = n
		r.pending = append(r.pending, &refPending{id: n, seen: map[ChannelIndex]bool{ch: true}, target: r.open, aborted: true})
	}
}

func (r *refTracker) ProcessEndOfPartition(ch ChannelIndex) {
	r.open--
	for i := 0; i < len(r.pending); i++ {
		p := r.pending[i]
		if p.seen[ch] {
			continue
		}
		p.seen[ch] = true
		if len(p.seen) >= p.target {
			r.pending = r.pending[i+1:]
			i = -1
			if !p.aborted {
				r.c.TriggerCheckpoint(Barrier{ID: p.id})
			}
		}
	}
}

func (r *refTracker) Abort(id CheckpointID) {
	var keep []*refPending
	for _, p := range r.pending {
		if p.id > id {
			keep = append(keep, p)
		}
	}
	r.pending = keep
	if id > r.latest {
		r.latest = id
	}
}

func (r *refTracker) LatestCheckpoint() CheckpointID { return r.latest }
func (r *refTracker) Aligning() bool                 { return false }

var (
	randomRuns = flag.Int("barrier.runs", 5000, "random histories per mode in TestRandomAgainstModel")
	randomSeed = flag.Uint64("barrier.seed", 0, "seed for TestRandomAgainstModel (0: from the clock)")
)

// TestRandomAgainstModel compares each handler with its reference model
// over many random histories, through the scenario harness's gate.
func TestRandomAgainstModel(t *testing.T) {
	seed := *randomSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	runs := *randomRuns
	if testing.Short() {
		runs /= 10
	}
	for _, mode := range []Mode{ExactlyOnce, AtLeastOnce} {
		t.Run(mode.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(mode)))
			for run := range runs {
				if msg := randomHistory(rng, mode); msg != "" {
					t.Fatalf("run %d: %s\nreproduce: go test ./barrier -run 'TestRandomAgainstModel/%s' -barrier.seed=%d",
						run, msg, mode, seed)
				}
			}
		})
	}
}

// randomHistory plays one random history against the real handler and
// the model; it returns a transcript of the history up to the first
// difference, or "" if there was none.
func randomHistory(rng *rand.Rand, mode Mode) string {
	n := 1 + rng.IntN(5)
	// Profiles: short histories over few ids; long ones that run far
	// ahead; and long ones of mostly new barriers and hardly any cancel
	// marker, which keep more than MaxTrackedCheckpoints pending.
	// idOdds are the cumulative odds (of 10) of the newest id, the next
	// one, and an older one; the rest jump ahead by up to spread.
	// The odds of each command are data 35, barrier 45, and:
	steps, spread, cancels, ends, aborts, idOdds := 5+rng.IntN(40), 3, 12, 4, 4, [3]int{4, 7, 9}
	switch rng.IntN(10) {
	case 0:
		steps, spread = 200+rng.IntN(400), 80
	case 1:
		n = max(n, 3)
		steps, cancels, ends, aborts, idOdds = 150+rng.IntN(300), 1, 0, 0, [3]int{0, 6, 10}
	}
	impl, err := newGate(mode, n)
	if err != nil {
		panic(err)
	}
	model := &gate{queues: make([][]item, n), blocked: make([]bool, n)}
	if mode == ExactlyOnce {
		model.h = newRefAligned(n, model)
	} else {
		model.h = newRefTracker(n, model)
	}
	var (
		script []string
		ended  = make([]bool, n)
		newest CheckpointID
	)
	for range steps {
		var open []int
		for ch := range n {
			if !ended[ch] {
				open = append(open, ch)
			}
		}
		if len(open) == 0 {
			break
		}
		ch := open[rng.IntN(len(open))]
		id := func() CheckpointID {
			// Mostly the newest id or the next; sometimes older or
			// further ahead.
			switch k := rng.IntN(10); {
			case k < idOdds[0]:
				return max(newest, 1)
			case k < idOdds[1]:
				newest++
				return newest
			case k < idOdds[2]:
				return CheckpointID(1 + rng.IntN(int(newest)+1))
			default:
				newest += CheckpointID(1 + rng.IntN(spread))
				return newest
			}
		}
		var it item
		var cmd string
		switch k := rng.IntN(80 + cancels + ends + aborts); {
		case k < 35:
			it, cmd = item{kind: itemData, ch: ChannelIndex(ch)}, fmt.Sprintf("data ch=%d", ch)
		case k < 80:
			id := id()
			it, cmd = item{kind: itemBarrier, ch: ChannelIndex(ch), id: id}, fmt.Sprintf("barrier ch=%d id=%d", ch, id)
		case k < 80+cancels:
			id := id()
			it, cmd = item{kind: itemCancel, ch: ChannelIndex(ch), id: id}, fmt.Sprintf("cancel ch=%d id=%d", ch, id)
		case k < 80+cancels+ends:
			ended[ch] = true
			it, cmd = item{kind: itemEnd, ch: ChannelIndex(ch)}, fmt.Sprintf("end ch=%d", ch)
		default:
			// The task aborts a checkpoint (not a scenario command).
			id := id()
			cmd = fmt.Sprintf("(task abort id=%d)", id)
			impl.h.Abort(id)
			model.h.Abort(id)
			it.kind = 255
		}
		var got, want string
		if it.kind == 255 {
			// An abort resumes channels; let the gates drain.
			got, want = impl.drain(), model.drain()
		} else {
			got, want = impl.arrive(it), model.arrive(it)
		}
		script = append(script, cmd+"\n----\n"+got)
		switch {
		case got != want:
			return fmt.Sprintf("new mode=%s channels=%d\n\n%s\nmodel wants:\n%s", mode, n, strings.Join(script, "\n"), want)
		case !slices.Equal(impl.blocked, model.blocked):
			return fmt.Sprintf("new mode=%s channels=%d\n\n%s\nblocked %v, model %v", mode, n, strings.Join(script, "\n"), impl.blocked, model.blocked)
		case impl.h.LatestCheckpoint() != model.h.LatestCheckpoint():
			return fmt.Sprintf("new mode=%s channels=%d\n\n%s\nlatest %d, model %d", mode, n, strings.Join(script, "\n"), impl.h.LatestCheckpoint(), model.h.LatestCheckpoint())
		case impl.h.Aligning() != model.h.Aligning():
			return fmt.Sprintf("new mode=%s channels=%d\n\n%s\naligning %v, model %v", mode, n, strings.Join(script, "\n"), impl.h.Aligning(), model.h.Aligning())
		}
	}
	return ""
}
