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
// docs/barrier-scenarios.md for the unaligned handler and the aligned one
// with a timeout (plus Handler.Abort's documentation), as naively as
// possible. TestRandomPullAgainstModel drives a real handler and its model
// with the same random inputs through the pull gate and demands identical
// behaviour. The models panic where the rules say an input cannot happen,
// so the random histories also check the harness.

// refUnaligned models the unaligned rules.
type refUnaligned struct {
	c         UnalignedController
	n         int
	open      map[ChannelIndex]bool
	cur       CheckpointID
	pending   bool
	delivered map[ChannelIndex]bool
}

func newRefUnaligned(n int, c UnalignedController) *refUnaligned {
	r := &refUnaligned{c: c, n: n, open: map[ChannelIndex]bool{}, delivered: map[ChannelIndex]bool{}}
	for ch := range n {
		r.open[ChannelIndex(ch)] = true
	}
	return r
}

func (r *refUnaligned) allOpenDelivered() bool {
	for ch := range r.open {
		if !r.delivered[ch] {
			return false
		}
	}
	return true
}

func (r *refUnaligned) ProcessPriorityBarrier(ch ChannelIndex, b Barrier) {
	n := b.ID
	switch {
	case n > r.cur:
		if r.pending {
			r.c.AbortCheckpoint(r.cur, AbortSubsumed)
		}
		r.cur, r.pending = n, true
		r.delivered = map[ChannelIndex]bool{}
		b.Options.Alignment = Unaligned
		r.c.TriggerCheckpoint(b)
		for d := range r.n {
			if r.open[ChannelIndex(d)] {
				r.c.PersistChannel(ChannelIndex(d), n)
			}
		}
		r.delivered[ch] = true
	case n == r.cur && r.pending:
		r.delivered[ch] = true
	default:
		return
	}
	if r.allOpenDelivered() {
		r.c.ChannelStateComplete(r.cur)
		r.pending = false
	}
}

func (r *refUnaligned) ProcessBarrier(ch ChannelIndex, b Barrier) { r.ProcessPriorityBarrier(ch, b) }
func (r *refUnaligned) ProcessAnnouncement(ChannelIndex, Barrier) {
	panic("model: an unaligned gate announces nothing")
}
func (r *refUnaligned) Tick(int64) {}

func (r *refUnaligned) ProcessCancel(ch ChannelIndex, n CheckpointID) {
	if n > r.cur || (n == r.cur && r.pending) {
		if r.pending && n > r.cur {
			r.c.AbortCheckpoint(r.cur, AbortSubsumed)
		}
		r.c.AbortCheckpoint(n, AbortCancelMarker)
		r.cur, r.pending = n, false
	}
}

func (r *refUnaligned) ProcessEndOfPartition(ch ChannelIndex) {
	delete(r.open, ch)
	if r.pending && r.allOpenDelivered() {
		r.c.ChannelStateComplete(r.cur)
		r.pending = false
	}
}

func (r *refUnaligned) Abort(id CheckpointID) {
	if r.pending && r.cur <= id {
		r.pending = false
	}
	if id > r.cur {
		r.cur = id
	}
}

func (r *refUnaligned) LatestCheckpoint() CheckpointID { return r.cur }
func (r *refUnaligned) Aligning() bool                 { return false }

// refTimeout models the rules of aligned with a timeout.
type refTimeout struct {
	c         UnalignedController
	n         int
	timeout   int64
	open      map[ChannelIndex]bool
	cur       CheckpointID
	first     Barrier
	pending   bool
	unaligned bool
	deadline  int64
	delivered map[ChannelIndex]bool
	waiting   map[ChannelIndex]bool // announced barrier cur still waiting
	order     []ChannelIndex        // announcement order
	blocked   map[ChannelIndex]bool
}

func newRefTimeout(n int, timeout int64, c UnalignedController) *refTimeout {
	r := &refTimeout{c: c, n: n, timeout: timeout, open: map[ChannelIndex]bool{},
		delivered: map[ChannelIndex]bool{}, waiting: map[ChannelIndex]bool{}, blocked: map[ChannelIndex]bool{}}
	for ch := range n {
		r.open[ChannelIndex(ch)] = true
	}
	return r
}

func (r *refTimeout) allOpenDelivered() bool {
	for ch := range r.open {
		if !r.delivered[ch] {
			return false
		}
	}
	return true
}

func (r *refTimeout) finish() {
	r.pending = false
	r.waiting = map[ChannelIndex]bool{}
	r.order = nil
	if len(r.blocked) > 0 {
		r.blocked = map[ChannelIndex]bool{}
		r.c.ResumeAllChannels()
	}
}

func (r *refTimeout) block(ch ChannelIndex) {
	r.blocked[ch] = true
	r.c.BlockChannel(ch)
}

func (r *refTimeout) ProcessAnnouncement(ch ChannelIndex, b Barrier) {
	n := b.ID
	if n > r.cur {
		if r.pending {
			r.c.AbortCheckpoint(r.cur, AbortSubsumed)
			r.finish()
		}
		r.cur, r.first, r.pending, r.unaligned = n, b, true, false
		r.delivered = map[ChannelIndex]bool{}
		r.deadline = b.Timestamp + r.timeout
		r.c.ScheduleAlignmentTimer(n, r.deadline)
	}
	if n != r.cur || !r.pending || r.delivered[ch] {
		return
	}
	if r.unaligned {
		r.overtake(ch)
	} else if !r.waiting[ch] {
		r.waiting[ch] = true
		r.order = append(r.order, ch)
	}
}

func (r *refTimeout) overtake(ch ChannelIndex) {
	delete(r.waiting, ch)
	r.c.PrioritizeBarrier(ch, r.cur)
	r.block(ch)
	r.delivered[ch] = true
	if r.allOpenDelivered() {
		r.c.ChannelStateComplete(r.cur)
		r.finish()
	}
}

func (r *refTimeout) ProcessBarrier(ch ChannelIndex, b Barrier) {
	n := b.ID
	if n > r.cur {
		panic(fmt.Sprintf("model: barrier %d taken on channel %d before its announcement", n, ch))
	}
	if n != r.cur || !r.pending || r.delivered[ch] {
		return
	}
	if r.unaligned {
		panic(fmt.Sprintf("model: barrier %d taken in band on channel %d after the switch", n, ch))
	}
	delete(r.waiting, ch)
	r.delivered[ch] = true
	if r.allOpenDelivered() {
		r.c.TriggerCheckpoint(r.first)
		r.finish()
		return
	}
	r.block(ch)
}

func (r *refTimeout) ProcessPriorityBarrier(ChannelIndex, Barrier) {
	panic("model: an aligned gate has no priority barriers")
}

func (r *refTimeout) Tick(now int64) {
	if !r.pending || r.unaligned || now < r.deadline {
		return
	}
	r.unaligned = true
	r.c.SwitchToUnaligned(r.cur)
	b := r.first
	b.Options.Alignment, b.Options.AlignmentTimeout = Unaligned, 0
	r.c.TriggerCheckpoint(b)
	for d := range r.n {
		if ch := ChannelIndex(d); r.open[ch] && !r.delivered[ch] {
			r.c.PersistChannel(ch, r.cur)
		}
	}
	for _, ch := range slices.Clone(r.order) {
		if r.pending && r.waiting[ch] && !r.delivered[ch] {
			r.overtake(ch)
		}
	}
	r.order = nil
}

func (r *refTimeout) ProcessCancel(ch ChannelIndex, n CheckpointID) {
	if n > r.cur || (n == r.cur && r.pending) {
		if r.pending && n > r.cur {
			r.c.AbortCheckpoint(r.cur, AbortSubsumed)
		}
		r.c.AbortCheckpoint(n, AbortCancelMarker)
		r.cur = n
		r.finish()
	}
}

func (r *refTimeout) ProcessEndOfPartition(ch ChannelIndex) {
	delete(r.open, ch)
	delete(r.waiting, ch)
	if !r.pending || !r.allOpenDelivered() {
		return
	}
	if r.unaligned {
		r.c.ChannelStateComplete(r.cur)
	} else {
		r.c.TriggerCheckpoint(r.first)
	}
	r.finish()
}

func (r *refTimeout) Abort(id CheckpointID) {
	if r.pending && r.cur <= id {
		r.finish()
	}
	if id > r.cur {
		r.cur = id
	}
}

func (r *refTimeout) LatestCheckpoint() CheckpointID { return r.cur }
func (r *refTimeout) Aligning() bool                 { return r.pending && !r.unaligned }

var pullRuns = flag.Int("barrier.pullruns", 6000, "random histories per mode in TestRandomPullAgainstModel")

// TestRandomPullAgainstModel compares the Unaligner and the TimeoutAligner
// with their reference models over many random histories (with poll,
// drain, advance and ts=), through the pull gate.
func TestRandomPullAgainstModel(t *testing.T) {
	seed := *randomSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-barrier.seed=%d reproduces)", seed, seed)
	runs := *pullRuns
	if testing.Short() {
		runs /= 10
	}
	for i, mode := range []string{"unaligned", "timeout"} {
		t.Run(mode, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(100+i)))
			for run := range runs {
				if msg := randomPullHistory(rng, mode == "unaligned"); msg != "" {
					t.Fatalf("run %d: %s\nreproduce: go test ./barrier -run 'TestRandomPullAgainstModel/%s' -barrier.seed=%d",
						run, msg, mode, seed)
				}
			}
		})
	}
}

// randomPullHistory plays one random history against the real handler and
// the model; it returns a transcript of the history up to the first
// difference, or "" if there was none.
func randomPullHistory(rng *rand.Rand, unaligned bool) string {
	n := 1 + rng.IntN(5)
	timeout := int64(rng.IntN(4) * rng.IntN(15)) // often 0
	steps, spread := 5+rng.IntN(60), 3
	if rng.IntN(10) == 0 {
		steps, spread = 200+rng.IntN(300), 20
	}
	// The odds of each command, cumulative.
	odds := []int{30, 55, 67, 71, 78, 83, 86, 88} // data barrier poll drain advance cancel end abort
	if rng.IntN(3) == 0 {
		odds = []int{20, 55, 60, 70, 75, 77, 79, 80} // barrier-heavy, few cancels
	}

	var header string
	impl := newPullGate(n, unaligned)
	model := newPullGate(n, unaligned)
	if unaligned {
		header = fmt.Sprintf("new mode=unaligned channels=%d", n)
		impl.h = NewUnaligned(n, impl)
		model.h = newRefUnaligned(n, model)
	} else {
		header = fmt.Sprintf("new mode=aligned channels=%d timeout=%d", n, timeout)
		impl.h = NewAlignedWithTimeout(n, time.Duration(timeout)*time.Millisecond, impl)
		model.h = newRefTimeout(n, timeout, model)
	}
	var (
		script []string
		ended  = make([]bool, n)
		newest CheckpointID
		tsOf   = map[CheckpointID]int64{} // every barrier of one id carries one ts
	)
	id := func() CheckpointID {
		switch k := rng.IntN(10); {
		case k < 4:
			return max(newest, 1)
		case k < 7:
			newest++
			return newest
		case k < 9:
			return CheckpointID(1 + rng.IntN(int(newest)+1))
		default:
			newest += CheckpointID(1 + rng.IntN(spread))
			return newest
		}
	}
	for range steps {
		var open []int
		for ch := range n {
			if !ended[ch] {
				open = append(open, ch)
			}
		}
		ch := -1
		if len(open) > 0 {
			ch = open[rng.IntN(len(open))]
		}
		var cmd, got, want string
		k := rng.IntN(odds[len(odds)-1])
		if ch < 0 && k < odds[1] || ch < 0 && k >= odds[4] && k < odds[6] {
			k = odds[1] // nothing can arrive any more: poll
		}
		switch {
		case k < odds[0]:
			it := item{kind: itemData, ch: ChannelIndex(ch)}
			cmd = fmt.Sprintf("data ch=%d", ch)
			got, want = impl.arrive(it, impl.clock), model.arrive(it, model.clock)
		case k < odds[1]:
			id := id()
			ts, ok := tsOf[id]
			if !ok {
				ts = impl.clock
				switch rng.IntN(4) {
				case 0:
					ts -= int64(rng.IntN(2*int(timeout) + 5))
				case 1:
					ts += int64(rng.IntN(2*int(timeout) + 5))
				}
				tsOf[id] = ts
			}
			it := item{kind: itemBarrier, ch: ChannelIndex(ch), id: id}
			cmd = fmt.Sprintf("barrier ch=%d id=%d ts=%d", ch, id, ts)
			got, want = impl.arrive(it, ts), model.arrive(it, ts)
		case k < odds[2]:
			cmd = "poll"
			got, want = impl.poll(), model.poll()
		case k < odds[3]:
			cmd = "drain"
			got, want = impl.drain(), model.drain()
		case k < odds[4]:
			ms := int64(rng.IntN(int(timeout) + 3))
			cmd = fmt.Sprintf("advance ms=%d", ms)
			got, want = impl.advance(ms), model.advance(ms)
		case k < odds[5]:
			id := id()
			it := item{kind: itemCancel, ch: ChannelIndex(ch), id: id}
			cmd = fmt.Sprintf("cancel ch=%d id=%d", ch, id)
			got, want = impl.arrive(it, impl.clock), model.arrive(it, model.clock)
		case k < odds[6]:
			ended[ch] = true
			it := item{kind: itemEnd, ch: ChannelIndex(ch)}
			cmd = fmt.Sprintf("end ch=%d", ch)
			got, want = impl.arrive(it, impl.clock), model.arrive(it, model.clock)
		default:
			// The task aborts a checkpoint (not a scenario command).
			id := id()
			cmd = fmt.Sprintf("(task abort id=%d)", id)
			got, want = impl.abort(id), model.abort(id)
		}
		script = append(script, cmd+"\n----\n"+got)
		fail := func(format string, args ...any) string {
			return fmt.Sprintf("%s\n\n%s\n%s", header, strings.Join(script, "\n"), fmt.Sprintf(format, args...))
		}
		// Both gates saw the same commands, so their queues differ only
		// through the handlers' calls: in the output, the blocks and the
		// recordings.
		switch {
		case got != want:
			return fail("model wants:\n%s", want)
		case !slices.Equal(impl.blocked, model.blocked) || !slices.Equal(impl.blockAt, model.blockAt):
			return fail("blocked %v at %v, model %v at %v", impl.blocked, impl.blockAt, model.blocked, model.blockAt)
		case !slices.Equal(impl.recording, model.recording):
			return fail("recording %v, model %v", impl.recording, model.recording)
		case impl.h.LatestCheckpoint() != model.h.LatestCheckpoint():
			return fail("latest %d, model %d", impl.h.LatestCheckpoint(), model.h.LatestCheckpoint())
		case impl.h.Aligning() != model.h.Aligning():
			return fail("aligning %v, model %v", impl.h.Aligning(), model.h.Aligning())
		}
	}
	return ""
}
