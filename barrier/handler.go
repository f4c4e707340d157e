package barrier

import (
	"errors"
	"fmt"
	"time"
)

// MaxTrackedCheckpoints is the number of pending checkpoints a Tracker
// follows at once. When a barrier for a new checkpoint would make it follow
// more, it silently forgets the oldest one (Flink's MAX_CHECKPOINTS_TO_TRACK).
const MaxTrackedCheckpoints = 50

// Controller carries out a handler's decisions. The task that owns the
// handler implements it. A handler calls it synchronously, from within the
// Process* method that caused the decision, in the order the decisions are
// made; a Controller must not call back into the handler.
type Controller interface {
	// BlockChannel stops the consumption of ch: the task must not hand the
	// handler (or the operator) anything more from ch until
	// ResumeAllChannels. The item that caused the block has been fully
	// consumed. After UnalignedController.PrioritizeBarrier(ch, ...) the
	// block starts at that barrier: what is queued ahead of it may still
	// be taken.
	BlockChannel(ch ChannelIndex)
	// ResumeAllChannels resumes every blocked channel. It is only called
	// while at least one channel is blocked. The task resumes consumption
	// once the current Process* call has returned.
	ResumeAllChannels()
	// TriggerCheckpoint tells the task that every input delivered barrier
	// b (or ended): it must snapshot its state now, before it processes
	// any further input, and then forward b downstream.
	TriggerCheckpoint(b Barrier)
	// AbortCheckpoint tells the task to give up checkpoint id: it declines
	// id to the coordinator and forwards a CancelMarker for id downstream.
	AbortCheckpoint(id CheckpointID, reason AbortReason)
}

// Handler is a barrier handler: the state machine between a task's input
// gate and its operator that decides, from the barriers, cancel markers and
// ends of partition arriving on the input channels, when the task blocks
// or resumes channels, takes a snapshot, or gives a checkpoint up. See the
// package documentation.
//
// A Handler is not safe for concurrent use; the task's goroutine owns it.
// Every method panics if ch is not in 0..numChannels-1, or if the channel
// already ended.
type Handler interface {
	// ProcessBarrier handles barrier b, just taken from channel ch.
	ProcessBarrier(ch ChannelIndex, b Barrier)
	// ProcessCancel handles a cancel marker for checkpoint id, just taken
	// from channel ch.
	ProcessCancel(ch ChannelIndex, id CheckpointID)
	// ProcessEndOfPartition handles the end of channel ch: nothing more
	// will arrive on it, and it no longer counts towards any checkpoint.
	ProcessEndOfPartition(ch ChannelIndex)
	// Abort is called by the task when the coordinator aborted checkpoint
	// id, or the task itself declined it. Any alignment or tracking for
	// id, or an older checkpoint, is dropped and blocked channels are
	// resumed; barriers for id or older that arrive later are ignored.
	// The handler does not call AbortCheckpoint for it: the task already
	// knows.
	Abort(id CheckpointID)
	// LatestCheckpoint returns the newest checkpoint id the handler has
	// seen (from a barrier, a cancel marker or Abort); zero if none.
	LatestCheckpoint() CheckpointID
	// Aligning reports whether an alignment is in progress, that is,
	// whether some channel is held back waiting for the others. Always
	// false for a Tracker.
	Aligning() bool
}

// UnalignedController is the Controller of the handlers that take
// unaligned checkpoints (Unaligner, TimeoutAligner). The task implements
// it; the calls come synchronously, in decision order, like Controller's.
//
// Besides the calls below, such a handler's TriggerCheckpoint passes a
// barrier whose Options.Alignment is Unaligned when the checkpoint is
// unaligned: the task then forwards it as a priority event, and the
// checkpoint's channel state is complete only at ChannelStateComplete.
type UnalignedController interface {
	Controller
	// PersistChannel starts recording channel ch's in-flight data into
	// the channel state of unaligned checkpoint id, right after
	// TriggerCheckpoint for id. The channel records, in order:
	//   - if barrier id has already reached ch (it waits in ch's queue,
	//     or ch consumed it, possibly by letting it overtake): the data
	//     buffers queued on ch ahead of that barrier, and nothing more;
	//   - otherwise: every data buffer queued on ch now, and then each
	//     data buffer arriving on ch, at its arrival, until barrier id
	//     arrives on ch (as a priority event or queued in band).
	// Recording also stops at ch's end of partition and when id
	// finishes: ChannelStateComplete(id), AbortCheckpoint(id), or the
	// task's own Handler.Abort(id). The recorded buffers still reach the
	// operator in their turn. The package documentation describes how a
	// channel does this.
	PersistChannel(ch ChannelIndex, id CheckpointID)
	// ChannelStateComplete tells the task that every open channel
	// delivered barrier id: no channel records for id any more and its
	// channel state can be finalized.
	ChannelStateComplete(id CheckpointID)
	// PrioritizeBarrier lets the announced barrier id on ch overtake the
	// data queued ahead of it: the task takes it out of ch's queue and
	// never hands it to the handler again. The data ahead of it stays
	// available. BlockChannel(ch) always follows: ch's producer stopped
	// after that barrier and stays stopped until ResumeAllChannels.
	PrioritizeBarrier(ch ChannelIndex, id CheckpointID)
	// SwitchToUnaligned tells the task that the aligned checkpoint id goes
	// on unaligned (its alignment timed out, or an upstream task's did
	// and sent the barrier as a priority event): TriggerCheckpoint and
	// the PersistChannel calls follow.
	SwitchToUnaligned(id CheckpointID)
	// ScheduleAlignmentTimer asks the task to call Tick once its clock
	// reaches deadline (unix milliseconds; it may already have passed).
	// A timer that fires late or for a finished checkpoint is harmless;
	// the task need not cancel it.
	ScheduleAlignmentTimer(id CheckpointID, deadline int64)
}

// UnalignedHandler is a Handler that can take unaligned checkpoints: an
// Unaligner or a TimeoutAligner. Its extra inputs, like Handler's, come
// from the task's goroutine; see the package documentation for the order.
type UnalignedHandler interface {
	Handler
	// ProcessPriorityBarrier handles barrier b, which just arrived on ch
	// as a priority event: it overtook whatever is queued on ch.
	ProcessPriorityBarrier(ch ChannelIndex, b Barrier)
	// ProcessAnnouncement handles the announcement of barrier b on ch: b
	// waits in ch's queue, no other barrier waits ahead of it there, and
	// ch is not blocked. Each queued barrier is announced once, before
	// ProcessBarrier hands it over.
	ProcessAnnouncement(ch ChannelIndex, b Barrier)
	// Tick tells the handler that the task's clock reads now (unix
	// milliseconds); the task calls it when a timer scheduled through
	// ScheduleAlignmentTimer fires. Calling it at other times is harmless.
	Tick(now int64)
}

// Config selects a barrier handler for NewWithConfig. The zero value is
// the exactly-once, aligned handler.
type Config struct {
	Mode Mode
	// Alignment is Aligned (the default), Unaligned or AlignedWithTimeout;
	// the last two need Mode ExactlyOnce.
	Alignment Alignment
	// AlignmentTimeout is, for AlignedWithTimeout only, how long after a
	// checkpoint's timestamp its alignment switches to unaligned: zero or
	// more, in whole milliseconds (a fraction is dropped).
	AlignmentTimeout time.Duration
}

// Validate reports whether c names a handler.
func (c Config) Validate() error {
	switch {
	case c.Mode != ExactlyOnce && c.Mode != AtLeastOnce:
		return fmt.Errorf("barrier: unknown mode %v", c.Mode)
	case c.Alignment > AlignedWithTimeout:
		return fmt.Errorf("barrier: unknown alignment %v", c.Alignment)
	case c.Mode == AtLeastOnce && c.Alignment != Aligned:
		return fmt.Errorf("barrier: alignment %v needs mode %v", c.Alignment, ExactlyOnce)
	case c.AlignmentTimeout < 0:
		return fmt.Errorf("barrier: negative alignment timeout %v", c.AlignmentTimeout)
	case c.AlignmentTimeout != 0 && c.Alignment != AlignedWithTimeout:
		return fmt.Errorf("barrier: an alignment timeout needs alignment %v", AlignedWithTimeout)
	}
	return nil
}

// NewWithConfig returns the barrier handler cfg selects over numChannels
// input channels: an *Aligner, a *Tracker, an *Unaligner or a
// *TimeoutAligner. The last two need c to be an UnalignedController. It
// returns an error if cfg is invalid, numChannels < 1, or c is nil or not
// an UnalignedController when one is needed.
func NewWithConfig(cfg Config, numChannels int, c Controller) (Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Alignment == Aligned {
		return New(cfg.Mode, numChannels, c)
	}
	if numChannels < 1 {
		return nil, fmt.Errorf("barrier: %d input channels, need at least 1", numChannels)
	}
	if c == nil {
		return nil, errors.New("barrier: nil Controller")
	}
	uc, ok := c.(UnalignedController)
	if !ok {
		return nil, fmt.Errorf("barrier: alignment %v needs an UnalignedController, got %T", cfg.Alignment, c)
	}
	if cfg.Alignment == Unaligned {
		return NewUnaligned(numChannels, uc), nil
	}
	return NewAlignedWithTimeout(numChannels, cfg.AlignmentTimeout, uc), nil
}

// AbortReason says why a handler gave a checkpoint up.
type AbortReason uint8

const (
	// AbortSubsumed: a barrier or cancel marker for a newer checkpoint
	// arrived before this one was complete, so this one can no longer
	// complete consistently.
	AbortSubsumed AbortReason = iota + 1
	// AbortCancelMarker: a cancel marker for this checkpoint arrived; an
	// upstream task gave it up.
	AbortCancelMarker
)

func (r AbortReason) String() string {
	switch r {
	case AbortSubsumed:
		return "subsumed by a newer checkpoint"
	case AbortCancelMarker:
		return "cancel marker received"
	}
	return fmt.Sprintf("AbortReason(%d)", uint8(r))
}

// New returns the barrier handler for mode over numChannels input
// channels: an *Aligner for ExactlyOnce, a *Tracker for AtLeastOnce. It
// returns an error if numChannels < 1, c is nil, or mode is unknown.
func New(mode Mode, numChannels int, c Controller) (Handler, error) {
	if numChannels < 1 {
		return nil, fmt.Errorf("barrier: %d input channels, need at least 1", numChannels)
	}
	if c == nil {
		return nil, errors.New("barrier: nil Controller")
	}
	switch mode {
	case ExactlyOnce:
		return NewAligned(numChannels, c), nil
	case AtLeastOnce:
		return NewTracker(numChannels, c), nil
	}
	return nil, fmt.Errorf("barrier: unknown mode %v", mode)
}

// mustValidate panics on arguments that only a programming error produces;
// New turns the same conditions into errors.
func mustValidate(kind string, numChannels int, c any) {
	if numChannels < 1 {
		panic(fmt.Sprintf("barrier: New%s with %d input channels, need at least 1", kind, numChannels))
	}
	if c == nil {
		panic(fmt.Sprintf("barrier: New%s with nil Controller", kind))
	}
}

// channels is the open/closed bookkeeping both handlers share.
type channels struct {
	closed []bool
	open   int
}

func newChannels(n int) channels {
	return channels{closed: make([]bool, n), open: n}
}

// check panics unless ch names a channel that has not ended.
func (c *channels) check(op string, ch ChannelIndex) {
	if ch < 0 || int(ch) >= len(c.closed) {
		panic(fmt.Sprintf("barrier: %s on channel %d, out of range [0,%d)", op, ch, len(c.closed)))
	}
	if c.closed[ch] {
		panic(fmt.Sprintf("barrier: %s on channel %d after its end of partition", op, ch))
	}
}

func (c *channels) close(ch ChannelIndex) {
	c.check("end of partition", ch)
	c.closed[ch] = true
	c.open--
}
