package barrier

import "time"

// TimeoutAligner is the exactly-once handler whose alignments time out
// into unaligned checkpoints (Flink's alternating barrier handler). Every
// checkpoint starts aligned, at the announcement of its first barrier: a
// channel that hands over barrier N is blocked until every open channel
// has, and then the task snapshots (TriggerCheckpoint), as with an
// Aligner. If the alignment is still going when the task's clock reaches
// the checkpoint's timestamp plus the timeout, the checkpoint switches to
// unaligned (SwitchToUnaligned): it is triggered at once, the data queued
// ahead of the missing barriers becomes its channel state
// (PersistChannel), and the barriers announced since, and those announced
// later, overtake their queued data (PrioritizeBarrier). Channels that
// delivered the barrier stay blocked until every barrier is in
// (ChannelStateComplete).
//
// Subsumption, cancel markers and ends of partition work as with an
// Aligner; a cancel marker also aborts a checkpoint that was only
// announced so far.
type TimeoutAligner struct {
	c       UnalignedController
	chans   channels
	timeout int64 // ms

	current   CheckpointID // newest checkpoint seen; zero if none
	first     Barrier      // the barrier that started current
	pending   bool         // current started and is not finished
	unaligned bool         // current switched to unaligned
	deadline  int64        // when current's alignment times out (unix ms)
	// delivered[ch] == current marks a channel that delivered barrier
	// current; numDelivered counts them while current is pending.
	delivered    []CheckpointID
	numDelivered int
	// announced[ch] == current marks a channel whose barrier current was
	// announced and still waits in its queue; order lists such channels
	// in announcement order (entries may be stale).
	announced []CheckpointID
	order     []ChannelIndex
	blocked   bool // some channel is blocked
}

var _ UnalignedHandler = (*TimeoutAligner)(nil)

// NewAlignedWithTimeout returns an exactly-once handler over numChannels
// input channels whose alignments switch to unaligned timeout after the
// checkpoint's timestamp (whole milliseconds; zero switches as soon as
// the checkpoint starts, unless its timestamp lies in the future). It
// reports to c. It panics if numChannels < 1, timeout < 0 or c is nil;
// NewWithConfig returns an error instead.
func NewAlignedWithTimeout(numChannels int, timeout time.Duration, c UnalignedController) *TimeoutAligner {
	mustValidate("AlignedWithTimeout", numChannels, c)
	if timeout < 0 {
		panic("barrier: NewAlignedWithTimeout with negative timeout " + timeout.String())
	}
	return &TimeoutAligner{
		c:         c,
		chans:     newChannels(numChannels),
		timeout:   timeout.Milliseconds(),
		delivered: make([]CheckpointID, numChannels),
		announced: make([]CheckpointID, numChannels),
	}
}

// ProcessAnnouncement implements UnalignedHandler.
func (a *TimeoutAligner) ProcessAnnouncement(ch ChannelIndex, b Barrier) {
	a.chans.check("announcement", ch)
	if b.ID > a.current {
		a.start(b)
	}
	if b.ID != a.current || !a.pending || a.delivered[ch] == a.current {
		return // older or finished: ignored when the operator reaches it
	}
	if a.unaligned {
		a.overtake(ch)
		return
	}
	if a.announced[ch] != a.current {
		a.announced[ch] = a.current
		a.order = append(a.order, ch)
	}
}

// ProcessBarrier implements Handler: barrier b was taken in band from ch.
func (a *TimeoutAligner) ProcessBarrier(ch ChannelIndex, b Barrier) {
	a.chans.check("barrier", ch)
	if b.ID > a.current {
		// Not announced: a channel that does not announce.
		a.start(b)
	}
	if b.ID != a.current || !a.pending || a.delivered[ch] == a.current {
		return // older, finished or a repeat: ignored, ch not blocked
	}
	a.announced[ch] = 0
	if a.arrive(ch) {
		return
	}
	a.blocked = true
	a.c.BlockChannel(ch)
}

// ProcessPriorityBarrier implements UnalignedHandler: an upstream task
// whose alignment timed out sent b as a priority event. The checkpoint
// switches to unaligned (if it has not yet) and ch counts as delivered; ch
// is not blocked, since a priority barrier does not stop its producer.
func (a *TimeoutAligner) ProcessPriorityBarrier(ch ChannelIndex, b Barrier) {
	a.chans.check("barrier", ch)
	if b.ID > a.current {
		a.start(b)
	}
	if b.ID != a.current || !a.pending || a.delivered[ch] == a.current {
		return
	}
	if !a.unaligned {
		a.switchToUnaligned()
		if !a.pending || a.delivered[ch] == a.current {
			return
		}
	}
	a.announced[ch] = 0
	a.arrive(ch)
}

// Tick implements UnalignedHandler.
func (a *TimeoutAligner) Tick(now int64) {
	if a.pending && !a.unaligned && now >= a.deadline {
		a.switchToUnaligned()
	}
}

// start makes b's checkpoint the current one, aborting a pending older one.
func (a *TimeoutAligner) start(b Barrier) {
	if a.pending {
		a.c.AbortCheckpoint(a.current, AbortSubsumed)
		a.finish()
	}
	a.current, a.first = b.ID, b
	a.pending, a.unaligned, a.numDelivered = true, false, 0
	a.deadline = b.Timestamp + a.timeout
	a.c.ScheduleAlignmentTimer(b.ID, a.deadline)
}

// switchToUnaligned triggers the pending checkpoint unaligned, has the
// data ahead of the missing barriers recorded, and lets the announced
// barriers overtake.
func (a *TimeoutAligner) switchToUnaligned() {
	a.unaligned = true
	a.c.SwitchToUnaligned(a.current)
	a.c.TriggerCheckpoint(asUnaligned(a.first))
	for d, closed := range a.chans.closed {
		if !closed && a.delivered[d] != a.current {
			a.c.PersistChannel(ChannelIndex(d), a.current)
		}
	}
	for _, ch := range a.order {
		if !a.pending {
			break
		}
		if a.announced[ch] == a.current && a.delivered[ch] != a.current {
			a.overtake(ch)
		}
	}
	a.order = a.order[:0]
}

// overtake lets the announced barrier on ch overtake its queued data.
func (a *TimeoutAligner) overtake(ch ChannelIndex) {
	a.announced[ch] = 0
	a.c.PrioritizeBarrier(ch, a.current)
	a.blocked = true
	a.c.BlockChannel(ch)
	a.arrive(ch)
}

// arrive records that ch delivered barrier current and completes the
// checkpoint if that was the last one; it reports whether it did.
func (a *TimeoutAligner) arrive(ch ChannelIndex) (complete bool) {
	a.delivered[ch] = a.current
	a.numDelivered++
	if a.numDelivered < a.chans.open {
		return false
	}
	a.complete()
	return true
}

// complete ends the pending checkpoint with all barriers in.
func (a *TimeoutAligner) complete() {
	if a.unaligned {
		a.c.ChannelStateComplete(a.current)
	} else {
		a.c.TriggerCheckpoint(a.first)
	}
	a.finish()
}

// finish ends the pending checkpoint (complete or aborted): every channel
// is resumed and the deadline no longer matters.
func (a *TimeoutAligner) finish() {
	a.pending = false
	a.order = a.order[:0]
	if a.blocked {
		a.blocked = false
		a.c.ResumeAllChannels()
	}
}

// ProcessCancel implements Handler.
func (a *TimeoutAligner) ProcessCancel(ch ChannelIndex, id CheckpointID) {
	a.chans.check("cancel marker", ch)
	if id < a.current || (id == a.current && !a.pending) {
		return // old, or already complete or aborted
	}
	if a.pending && a.current < id {
		a.c.AbortCheckpoint(a.current, AbortSubsumed)
	}
	a.c.AbortCheckpoint(id, AbortCancelMarker)
	a.current = id
	a.finish()
}

// ProcessEndOfPartition implements Handler.
func (a *TimeoutAligner) ProcessEndOfPartition(ch ChannelIndex) {
	a.chans.close(ch)
	a.announced[ch] = 0
	if !a.pending {
		return
	}
	if a.delivered[ch] == a.current {
		// Only possible if the task let a blocked channel through.
		a.delivered[ch] = 0
		a.numDelivered--
	}
	if a.numDelivered == a.chans.open {
		a.complete()
	}
}

// Abort implements Handler. The task stops recording channel state for
// the checkpoints it aborts.
func (a *TimeoutAligner) Abort(id CheckpointID) {
	if a.pending && a.current <= id {
		a.finish()
	}
	a.current = max(a.current, id)
}

// LatestCheckpoint implements Handler.
func (a *TimeoutAligner) LatestCheckpoint() CheckpointID { return a.current }

// Aligning implements Handler: whether a checkpoint is pending in its
// aligned phase.
func (a *TimeoutAligner) Aligning() bool { return a.pending && !a.unaligned }
