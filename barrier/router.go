package barrier

import "fmt"

// RouterController is the Controller of a Router: an UnalignedController
// that also tells the router whether an unaligned checkpoint's channel
// state is still being recorded (its input channels, or the task's own
// output queues, are not final yet), which only the task knows.
type RouterController interface {
	UnalignedController
	// ChannelStatePending reports whether the channel state of checkpoint
	// id was started (an unaligned trigger) and is neither complete nor
	// aborted.
	ChannelStatePending(id CheckpointID) bool
}

// Router is the barrier handler of an exactly-once task whose checkpoints
// may be unaligned (Alignment Unaligned or AlignedWithTimeout): it sends
// savepoints, and checkpoints whose barriers ask for Aligned, to an
// Aligner (savepoints are always aligned, as in Flink), and the other
// checkpoints to the unaligned handler the Config selects (an Unaligner
// or a TimeoutAligner). Checkpoint IDs grow across both:
//
//   - a barrier, announcement or cancel marker of a newer checkpoint than
//     the latest seen goes to its handler (a cancel marker to the handler
//     of the latest checkpoint, the unaligned one if none) and becomes the
//     latest; if the latest was the other handler's, that one gives it up
//     (Abort) and, if it was still in progress at this task (aligning, or
//     its channel state pending), the router aborts it first
//     (AbortCheckpoint with AbortSubsumed);
//   - anything of the latest checkpoint goes to that checkpoint's handler
//     only (a barrier of the same ID routed to the other one is ignored);
//   - anything of an older checkpoint is ignored.
//
// An end of partition and the task's Abort go to both handlers; Tick to
// the unaligned one. The channel indices are the task's flat input
// channels, as for every handler. Like the handlers, a Router is pure
// and single-goroutine; its rules are those of docs/barrier-scenarios.md
// (mode=router), whose transcripts in testdata/router_*.txt run through
// it.
type Router struct {
	c       RouterController
	aligned Handler
	main    UnalignedHandler
	latest  CheckpointID
	owner   Handler // the handler of latest; nil if none
}

var _ UnalignedHandler = (*Router)(nil)

// NewRouter returns a Router over numChannels input channels whose
// checkpoints go to the unaligned handler cfg selects; cfg must be
// exactly-once with Alignment Unaligned or AlignedWithTimeout.
func NewRouter(cfg Config, numChannels int, c RouterController) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Mode != ExactlyOnce || cfg.Alignment == Aligned {
		return nil, fmt.Errorf("barrier: a router needs unaligned checkpoints, not mode %v with alignment %v", cfg.Mode, cfg.Alignment)
	}
	if c == nil {
		return nil, fmt.Errorf("barrier: nil RouterController")
	}
	h, err := NewWithConfig(cfg, numChannels, c)
	if err != nil {
		return nil, err
	}
	return &Router{c: c, aligned: NewAligned(numChannels, c), main: h.(UnalignedHandler)}, nil
}

// pick returns the handler of barrier b.
func (r *Router) pick(b Barrier) Handler {
	if b.Options.Kind == Savepoint || b.Options.Alignment == Aligned {
		return r.aligned
	}
	return r.main
}

// admit reports whether something of checkpoint id may go to h, making
// id the latest and giving up the other handler's older checkpoint.
func (r *Router) admit(id CheckpointID, h Handler) bool {
	switch {
	case id < r.latest:
		return false
	case id == r.latest:
		return r.owner == nil || r.owner == h
	}
	if r.owner != nil && r.owner != h {
		if r.owner.Aligning() || r.c.ChannelStatePending(r.latest) {
			r.c.AbortCheckpoint(r.latest, AbortSubsumed)
		}
		r.owner.Abort(r.latest)
	}
	r.latest, r.owner = id, h
	return true
}

// ProcessBarrier implements Handler.
func (r *Router) ProcessBarrier(ch ChannelIndex, b Barrier) {
	if h := r.pick(b); r.admit(b.ID, h) {
		h.ProcessBarrier(ch, b)
	}
}

// ProcessPriorityBarrier implements UnalignedHandler: a priority barrier
// is always an unaligned checkpoint's.
func (r *Router) ProcessPriorityBarrier(ch ChannelIndex, b Barrier) {
	if r.admit(b.ID, r.main) {
		r.main.ProcessPriorityBarrier(ch, b)
	}
}

// ProcessAnnouncement implements UnalignedHandler: only the unaligned
// handler's barriers are announced; an aligned one's is ignored.
func (r *Router) ProcessAnnouncement(ch ChannelIndex, b Barrier) {
	if r.pick(b) == r.main && r.admit(b.ID, r.main) {
		r.main.ProcessAnnouncement(ch, b)
	}
}

// ProcessCancel implements Handler.
func (r *Router) ProcessCancel(ch ChannelIndex, id CheckpointID) {
	h := r.owner
	if h == nil {
		h = r.main
	}
	if r.admit(id, h) {
		h.ProcessCancel(ch, id)
	}
}

// ProcessEndOfPartition implements Handler.
func (r *Router) ProcessEndOfPartition(ch ChannelIndex) {
	r.aligned.ProcessEndOfPartition(ch)
	r.main.ProcessEndOfPartition(ch)
}

// Abort implements Handler.
func (r *Router) Abort(id CheckpointID) {
	r.aligned.Abort(id)
	r.main.Abort(id)
	r.latest = max(r.latest, id)
}

// Tick implements UnalignedHandler.
func (r *Router) Tick(now int64) { r.main.Tick(now) }

// LatestCheckpoint implements Handler.
func (r *Router) LatestCheckpoint() CheckpointID { return r.latest }

// Aligning implements Handler.
func (r *Router) Aligning() bool { return r.aligned.Aligning() || r.main.Aligning() }
