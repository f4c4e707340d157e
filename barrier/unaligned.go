package barrier

// Unaligner is the exactly-once handler for unaligned checkpoints (Flink's
// SingleCheckpointBarrierHandler in unaligned mode). Its barriers arrive
// as priority events, ahead of the data queued on their channel, and are
// handled at once. The first barrier of a new checkpoint triggers it:
// the snapshot covers the records the operator has taken so far, and the
// data still in flight on the channels, up to each channel's barrier, is
// recorded as the checkpoint's channel state (PersistChannel). When every
// open channel has delivered the barrier, the channel state is complete
// (ChannelStateComplete). Nothing is ever blocked.
//
// A barrier for a newer checkpoint while one is pending aborts the
// pending one (AbortSubsumed) and starts the new one. A cancel marker for
// the pending or a newer checkpoint aborts it (AbortCancelMarker), after
// aborting an older pending one (AbortSubsumed). Barriers and markers for
// older or finished checkpoints are ignored. An ended channel stops
// counting, which may complete the pending checkpoint.
type Unaligner struct {
	c     UnalignedController
	chans channels

	current CheckpointID // newest checkpoint seen; zero if none
	pending bool         // current was triggered and is not finished
	// delivered[ch] == current marks a channel that delivered barrier
	// current; numDelivered counts them while current is pending.
	delivered    []CheckpointID
	numDelivered int
}

var _ UnalignedHandler = (*Unaligner)(nil)

// NewUnaligned returns an unaligned exactly-once handler over numChannels
// input channels that reports to c. It panics if numChannels < 1 or c is
// nil; NewWithConfig returns an error instead.
func NewUnaligned(numChannels int, c UnalignedController) *Unaligner {
	mustValidate("Unaligned", numChannels, c)
	return &Unaligner{
		c:         c,
		chans:     newChannels(numChannels),
		delivered: make([]CheckpointID, numChannels),
	}
}

// ProcessPriorityBarrier implements UnalignedHandler: barrier b arrived on
// ch ahead of everything queued there.
func (u *Unaligner) ProcessPriorityBarrier(ch ChannelIndex, b Barrier) {
	u.chans.check("barrier", ch)
	switch {
	case b.ID > u.current:
		if u.pending {
			u.c.AbortCheckpoint(u.current, AbortSubsumed)
		}
		u.current, u.pending, u.numDelivered = b.ID, true, 0
		u.c.TriggerCheckpoint(asUnaligned(b))
		for d, closed := range u.chans.closed {
			if !closed {
				u.c.PersistChannel(ChannelIndex(d), b.ID)
			}
		}
		u.deliver(ch)
	case b.ID == u.current && u.pending && u.delivered[ch] != u.current:
		u.deliver(ch)
	}
	// Otherwise the barrier is older, its checkpoint is finished, or ch
	// repeats it: ignore it.
}

// ProcessBarrier implements Handler: a barrier taken in band, with nothing
// queued ahead of it, is handled like a priority one.
func (u *Unaligner) ProcessBarrier(ch ChannelIndex, b Barrier) {
	u.ProcessPriorityBarrier(ch, b)
}

// ProcessAnnouncement implements UnalignedHandler. An Unaligner has no use
// for announcements: the barrier itself follows.
func (u *Unaligner) ProcessAnnouncement(ch ChannelIndex, _ Barrier) {
	u.chans.check("announcement", ch)
}

// Tick implements UnalignedHandler. An Unaligner has no timer.
func (u *Unaligner) Tick(int64) {}

func (u *Unaligner) deliver(ch ChannelIndex) {
	u.delivered[ch] = u.current
	u.numDelivered++
	u.maybeComplete()
}

// maybeComplete finishes the pending checkpoint once every open channel
// delivered its barrier.
func (u *Unaligner) maybeComplete() {
	if u.pending && u.numDelivered == u.chans.open {
		u.pending = false
		u.c.ChannelStateComplete(u.current)
	}
}

// ProcessCancel implements Handler.
func (u *Unaligner) ProcessCancel(ch ChannelIndex, id CheckpointID) {
	u.chans.check("cancel marker", ch)
	if id < u.current || (id == u.current && !u.pending) {
		return // old, or already complete or aborted
	}
	if u.pending && u.current < id {
		u.c.AbortCheckpoint(u.current, AbortSubsumed)
	}
	u.c.AbortCheckpoint(id, AbortCancelMarker)
	u.current, u.pending = id, false
}

// ProcessEndOfPartition implements Handler.
func (u *Unaligner) ProcessEndOfPartition(ch ChannelIndex) {
	u.chans.close(ch)
	if !u.pending {
		return
	}
	if u.delivered[ch] == u.current {
		u.delivered[ch] = 0
		u.numDelivered--
	}
	u.maybeComplete()
}

// Abort implements Handler. The task stops recording channel state for
// the checkpoints it aborts.
func (u *Unaligner) Abort(id CheckpointID) {
	if u.pending && u.current <= id {
		u.pending = false
	}
	u.current = max(u.current, id)
}

// LatestCheckpoint implements Handler.
func (u *Unaligner) LatestCheckpoint() CheckpointID { return u.current }

// Aligning implements Handler: an Unaligner never aligns.
func (u *Unaligner) Aligning() bool { return false }

// asUnaligned returns b marked as the barrier of an unaligned checkpoint.
func asUnaligned(b Barrier) Barrier {
	b.Options.Alignment = Unaligned
	b.Options.AlignmentTimeout = 0
	return b
}
