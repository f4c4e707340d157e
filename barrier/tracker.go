package barrier

// Tracker is the at-least-once barrier handler (Flink's
// CheckpointBarrierTracker). It never blocks a channel: it counts, per
// pending checkpoint, the channels that delivered its barrier, and
// triggers the checkpoint when the last one arrives. Records behind a
// barrier may reach the operator before the snapshot, so after a restore
// they may be processed twice.
//
// A pending checkpoint's target is the number of open channels when its
// first barrier arrived; a channel that ends counts as delivered. When a
// checkpoint completes, every older pending one is dropped silently (the
// newer snapshot subsumes it). A cancel marker aborts its checkpoint
// (AbortCancelMarker) and every older pending one (AbortSubsumed). The
// Tracker follows at most MaxTrackedCheckpoints pending checkpoints.
type Tracker struct {
	c     Controller
	chans channels

	latest  CheckpointID // newest checkpoint seen; zero if none
	pending []*tracked   // oldest first
	free    []*tracked   // recycled entries
}

var _ Handler = (*Tracker)(nil)

// tracked is one pending checkpoint of a Tracker.
type tracked struct {
	barrier Barrier // the first barrier (only the ID, for a cancel marker)
	seen    []uint64
	count   int // channels in seen
	target  int
	aborted bool
}

// mark adds ch to the channels that delivered the barrier and reports
// whether that completes the checkpoint.
func (p *tracked) mark(ch ChannelIndex) (complete bool) {
	w, bit := ch/64, uint64(1)<<(ch%64)
	if p.seen[w]&bit == 0 {
		p.seen[w] |= bit
		p.count++
	}
	return p.count >= p.target
}

func (p *tracked) hasSeen(ch ChannelIndex) bool {
	return p.seen[ch/64]&(uint64(1)<<(ch%64)) != 0
}

// NewTracker returns an at-least-once handler over numChannels input
// channels that reports to c. It panics if numChannels < 1 or c is nil;
// New returns an error instead.
func NewTracker(numChannels int, c Controller) *Tracker {
	mustValidate("Tracker", numChannels, c)
	return &Tracker{
		c:       c,
		chans:   newChannels(numChannels),
		pending: make([]*tracked, 0, MaxTrackedCheckpoints+1),
	}
}

// ProcessBarrier implements Handler.
func (t *Tracker) ProcessBarrier(ch ChannelIndex, b Barrier) {
	t.chans.check("barrier", ch)
	if t.chans.open == 1 && b.ID > t.latest {
		// Every pending checkpoint is older and can no longer complete
		// before this one.
		t.dropThrough(len(t.pending) - 1)
		t.latest = b.ID
		t.c.TriggerCheckpoint(b)
		return
	}
	if i := t.find(b.ID); i >= 0 {
		if p := t.pending[i]; p.mark(ch) {
			t.completeThrough(i)
		}
		return
	}
	if b.ID > t.latest {
		t.latest = b.ID
		t.start(b, false).mark(ch)
		if len(t.pending) > MaxTrackedCheckpoints {
			t.dropThrough(0)
		}
	}
	// Otherwise the checkpoint is older than the newest one seen and not
	// pending: it completed, was aborted or was forgotten.
}

// ProcessCancel implements Handler.
func (t *Tracker) ProcessCancel(ch ChannelIndex, id CheckpointID) {
	t.chans.check("cancel marker", ch)
	for len(t.pending) > 0 && t.pending[0].barrier.ID < id {
		old, aborted := t.pending[0].barrier.ID, t.pending[0].aborted
		t.dropThrough(0)
		if !aborted {
			t.c.AbortCheckpoint(old, AbortSubsumed)
		}
	}
	switch {
	case len(t.pending) > 0 && t.pending[0].barrier.ID == id:
		p := t.pending[0]
		if !p.aborted {
			p.aborted = true
			t.c.AbortCheckpoint(id, AbortCancelMarker)
		}
		// Keep counting so that the entry goes once every channel
		// delivered its barrier or marker.
		if p.mark(ch) {
			t.dropThrough(0)
		}
	case id > t.latest:
		// Every pending checkpoint was older and is gone.
		t.c.AbortCheckpoint(id, AbortCancelMarker)
		t.latest = id
		t.start(Barrier{ID: id}, true).mark(ch)
	}
}

// ProcessEndOfPartition implements Handler.
func (t *Tracker) ProcessEndOfPartition(ch ChannelIndex) {
	t.chans.close(ch)
	for i := 0; i < len(t.pending); i++ {
		p := t.pending[i]
		if p.hasSeen(ch) || !p.mark(ch) {
			continue
		}
		t.completeThrough(i)
		i = -1 // the rest moved to the front
	}
}

// Abort implements Handler.
func (t *Tracker) Abort(id CheckpointID) {
	i := len(t.pending) - 1
	for i >= 0 && t.pending[i].barrier.ID > id {
		i--
	}
	t.dropThrough(i)
	t.latest = max(t.latest, id)
}

// LatestCheckpoint implements Handler.
func (t *Tracker) LatestCheckpoint() CheckpointID { return t.latest }

// Aligning implements Handler: a Tracker never aligns.
func (t *Tracker) Aligning() bool { return false }

// find returns the position of checkpoint id among the pending ones, or -1.
func (t *Tracker) find(id CheckpointID) int {
	for i, p := range t.pending {
		if p.barrier.ID == id {
			return i
		}
	}
	return -1
}

// start appends a pending checkpoint whose target is the open channels.
func (t *Tracker) start(b Barrier, aborted bool) *tracked {
	var p *tracked
	if n := len(t.free); n > 0 {
		p, t.free = t.free[n-1], t.free[:n-1]
		clear(p.seen)
	} else {
		p = &tracked{seen: make([]uint64, (len(t.chans.closed)+63)/64)}
	}
	p.barrier, p.count, p.target, p.aborted = b, 0, t.chans.open, aborted
	t.pending = append(t.pending, p)
	return p
}

// completeThrough removes the completed checkpoint at position i and every
// older one, then triggers it unless it was aborted.
func (t *Tracker) completeThrough(i int) {
	b, aborted := t.pending[i].barrier, t.pending[i].aborted
	t.dropThrough(i)
	if !aborted {
		t.c.TriggerCheckpoint(b)
	}
}

// dropThrough forgets the pending checkpoints at positions 0..i.
func (t *Tracker) dropThrough(i int) {
	if i < 0 {
		return
	}
	t.free = append(t.free, t.pending[:i+1]...)
	n := copy(t.pending, t.pending[i+1:])
	clear(t.pending[n:])
	t.pending = t.pending[:n]
}
