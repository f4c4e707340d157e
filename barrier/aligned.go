package barrier

// Aligner is the exactly-once barrier handler (Flink's
// SingleCheckpointBarrierHandler with aligned checkpoints). When the first
// barrier of a new checkpoint arrives it starts an alignment: every channel
// that delivered the barrier is blocked, so none of the records behind it
// reach the operator before the snapshot. When every open channel has
// delivered it, Aligner triggers the checkpoint and resumes all channels.
//
// A barrier for a newer checkpoint during an alignment aborts the current
// one (AbortSubsumed) and starts the new one. A cancel marker for the
// current or a newer checkpoint aborts it (AbortCancelMarker), after
// aborting an older alignment in progress (AbortSubsumed). Barriers and
// cancel markers for older or already finished checkpoints are ignored.
// An ended channel stops counting, which may complete the alignment.
type Aligner struct {
	c     Controller
	chans channels

	current  CheckpointID // newest checkpoint seen; zero if none
	first    Barrier      // the first barrier of current
	aligning bool
	// arrived[ch] == current marks a channel that delivered barrier
	// current during the alignment in progress; numArrived counts them.
	arrived    []CheckpointID
	numArrived int
	blocked    bool // some channel is blocked
}

var _ Handler = (*Aligner)(nil)

// NewAligned returns an exactly-once handler over numChannels input
// channels that reports to c. It panics if numChannels < 1 or c is nil;
// New returns an error instead.
func NewAligned(numChannels int, c Controller) *Aligner {
	mustValidate("Aligned", numChannels, c)
	return &Aligner{
		c:       c,
		chans:   newChannels(numChannels),
		arrived: make([]CheckpointID, numChannels),
	}
}

// ProcessBarrier implements Handler.
func (a *Aligner) ProcessBarrier(ch ChannelIndex, b Barrier) {
	a.chans.check("barrier", ch)
	switch {
	case b.ID > a.current:
		if a.aligning {
			a.c.AbortCheckpoint(a.current, AbortSubsumed)
			a.stopAlignment()
		}
		a.current, a.first = b.ID, b
		a.aligning = true
		a.numArrived = 0
		a.arrive(ch)
	case b.ID == a.current && a.aligning && a.arrived[ch] != a.current:
		a.arrive(ch)
	}
	// Otherwise the barrier is older, its checkpoint already completed or
	// was aborted, or ch repeats it: ignore it.
}

// arrive records that ch delivered the current barrier: it completes the
// alignment, or blocks ch.
func (a *Aligner) arrive(ch ChannelIndex) {
	a.arrived[ch] = a.current
	a.numArrived++
	if a.numArrived == a.chans.open {
		a.complete()
		return
	}
	a.blocked = true
	a.c.BlockChannel(ch)
}

// complete triggers the aligned checkpoint, then resumes the channels.
func (a *Aligner) complete() {
	a.aligning = false
	a.c.TriggerCheckpoint(a.first)
	a.resume()
}

func (a *Aligner) stopAlignment() {
	a.aligning = false
	a.resume()
}

func (a *Aligner) resume() {
	if a.blocked {
		a.blocked = false
		a.c.ResumeAllChannels()
	}
}

// ProcessCancel implements Handler.
func (a *Aligner) ProcessCancel(ch ChannelIndex, id CheckpointID) {
	a.chans.check("cancel marker", ch)
	if id < a.current || (id == a.current && !a.aligning) {
		return // old, or already completed or aborted
	}
	if a.aligning && a.current < id {
		a.c.AbortCheckpoint(a.current, AbortSubsumed)
	}
	a.c.AbortCheckpoint(id, AbortCancelMarker)
	a.current = id
	a.stopAlignment()
}

// ProcessEndOfPartition implements Handler.
func (a *Aligner) ProcessEndOfPartition(ch ChannelIndex) {
	a.chans.close(ch)
	if !a.aligning {
		return
	}
	if a.arrived[ch] == a.current {
		// Only possible if the task let a blocked channel through.
		a.arrived[ch] = 0
		a.numArrived--
	}
	if a.numArrived == a.chans.open {
		a.complete()
	}
}

// Abort implements Handler.
func (a *Aligner) Abort(id CheckpointID) {
	if a.aligning && a.current <= id {
		a.stopAlignment()
	}
	a.current = max(a.current, id)
}

// LatestCheckpoint implements Handler.
func (a *Aligner) LatestCheckpoint() CheckpointID { return a.current }

// Aligning implements Handler.
func (a *Aligner) Aligning() bool { return a.aligning }
