package task

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/network/wire"
	"github.com/weirstream/weir/state"
)

// This file wires unaligned checkpoints through a task: the channel state
// it records while a checkpoint is pending (channelState), the
// barrier.UnalignedController (and RouterController) side of the
// checkpointer, and the timers the alignment timeout needs.

// channelState collects the channel state of one unaligned checkpoint of
// a task: what its input channels record until their barriers arrive, and
// what its own barrier overtook in its output subpartitions. Input
// channels record from their own goroutines (a remote channel's
// connection reader), so it has a lock; it is a leaf.
type channelState struct {
	id barrier.CheckpointID

	mu struct {
		sync.Mutex
		cs         state.ChannelState
		inputsOpen bool // until every input channel delivered its barrier or ended
		outputs    int  // output partitions whose overtaken buffers are not final yet
		aborted    bool
	}
	done chan struct{} // closed once complete or aborted
}

// newChannelState returns the channel state of checkpoint id over inputs
// input channels and outputs partitions (their subpartition counts); the
// input side records until inputsComplete if inputsOpen, and the output
// side of pendingOutputs partitions until outputDone.
func newChannelState(id barrier.CheckpointID, inputs int, outputs []int, inputsOpen bool, pendingOutputs int) *channelState {
	s := &channelState{id: id, done: make(chan struct{})}
	s.mu.cs.Inputs = make([][]state.InFlight, inputs)
	s.mu.cs.Outputs = make([][][]state.InFlight, len(outputs))
	for i, n := range outputs {
		s.mu.cs.Outputs[i] = make([][]state.InFlight, n)
	}
	s.mu.inputsOpen = inputsOpen
	s.mu.outputs = pendingOutputs
	s.checkDoneLocked()
	return s
}

func (s *channelState) checkDoneLocked() {
	if !s.mu.inputsOpen && s.mu.outputs == 0 && !s.mu.aborted {
		select {
		case <-s.done:
		default:
			close(s.done)
		}
	}
}

// inputsComplete: every input channel stopped recording.
func (s *channelState) inputsComplete() {
	s.mu.Lock()
	s.mu.inputsOpen = false
	s.checkDoneLocked()
	s.mu.Unlock()
}

// outputDone: the barrier of one more output partition left every
// subpartition (taken in band, or converted by the producer's alignment
// timeout): its overtaken buffers are final.
func (s *channelState) outputDone() {
	s.mu.Lock()
	s.mu.outputs--
	s.checkDoneLocked()
	s.mu.Unlock()
}

// abort drops everything recorded and wakes the snapshot waiting for it.
func (s *channelState) abort() {
	s.mu.Lock()
	if !s.mu.aborted {
		s.mu.aborted = true
		s.mu.cs = state.ChannelState{}
		select {
		case <-s.done:
		default:
			close(s.done)
		}
	}
	s.mu.Unlock()
}

// result returns the channel state once done (false: aborted).
func (s *channelState) result() (state.ChannelState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.cs, !s.mu.aborted
}

func (s *channelState) add(r stateRecorder, it state.InFlight) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.aborted {
		return
	}
	if r.output {
		s.mu.cs.Outputs[r.part][r.index] = append(s.mu.cs.Outputs[r.part][r.index], it)
	} else {
		s.mu.cs.Inputs[r.index] = append(s.mu.cs.Inputs[r.index], it)
	}
}

// stateRecorder records one channel (input channel index, or output
// partition and subpartition) into a channelState; it implements
// network.Recorder.
type stateRecorder struct {
	s      *channelState
	output bool
	part   int
	index  int
}

// Record implements network.Recorder: data buffers and the events that
// must keep their place among them (watermarks, watermark statuses) are
// copied; barriers, cancel markers and announcements are not part of the
// in-flight data.
func (r stateRecorder) Record(b *buffer.Buffer) {
	p := b.Bytes()
	if b.IsData() {
		if len(p) > 0 {
			r.s.add(r, state.InFlight{Bytes: append([]byte(nil), p...)})
		}
		return
	}
	if len(p) > 0 && (wire.EventKind(p[0]) == wire.EventWatermark || wire.EventKind(p[0]) == wire.EventWatermarkStatus) {
		r.s.add(r, state.InFlight{Event: true, Bytes: append([]byte(nil), p...)})
	}
}

// appendData records bytes that are not in a buffer (a deserializer's
// unconsumed bytes).
func (r stateRecorder) appendData(p []byte) {
	if len(p) > 0 {
		r.s.add(r, state.InFlight{Bytes: p})
	}
}

// unalignedChannel is what the task needs of an input channel for
// unaligned checkpoints (network's local and remote channels).
type unalignedChannel interface {
	Persist(id barrier.CheckpointID, rec network.Recorder)
	StopPersisting(id barrier.CheckpointID)
	PrioritizeBarrier(id barrier.CheckpointID)
}

func (c *checkpointer) channel(ch barrier.ChannelIndex) unalignedChannel {
	uc, ok := c.t.cfg.Gate.Channel(int(ch)).(unalignedChannel)
	if !ok {
		panic(fmt.Sprintf("task: input channel %T cannot take unaligned checkpoints", c.t.cfg.Gate.Channel(int(ch))))
	}
	return uc
}

// PersistChannel implements barrier.UnalignedController: what channel ch
// holds of the in-flight data of checkpoint id becomes its channel state,
// starting with the bytes its deserializer received and has not handed
// out (part of a record spanning buffers, or the rest of a buffer).
func (c *checkpointer) PersistChannel(ch barrier.ChannelIndex, id barrier.CheckpointID) {
	s := c.states[id]
	if s == nil {
		return
	}
	rec := stateRecorder{s: s, index: int(ch)}
	rec.appendData(c.t.deser[ch].AppendUnconsumed(nil))
	c.channel(ch).Persist(id, rec)
}

// ChannelStateComplete implements barrier.UnalignedController.
func (c *checkpointer) ChannelStateComplete(id barrier.CheckpointID) {
	c.stopPersisting(id)
	if s := c.states[id]; s != nil {
		s.inputsComplete()
	}
}

func (c *checkpointer) stopPersisting(id barrier.CheckpointID) {
	for i := range c.t.cfg.Gate.NumChannels() {
		c.channel(barrier.ChannelIndex(i)).StopPersisting(id)
	}
}

// PrioritizeBarrier implements barrier.UnalignedController.
func (c *checkpointer) PrioritizeBarrier(ch barrier.ChannelIndex, id barrier.CheckpointID) {
	c.channel(ch).PrioritizeBarrier(id)
}

// SwitchToUnaligned implements barrier.UnalignedController: the
// unaligned trigger that follows does the work.
func (c *checkpointer) SwitchToUnaligned(id barrier.CheckpointID) {
	c.t.log.Debug("checkpoint alignment timed out; it goes on unaligned", zap.Uint64("checkpoint", uint64(id)))
}

// ScheduleAlignmentTimer implements barrier.UnalignedController.
func (c *checkpointer) ScheduleAlignmentTimer(_ barrier.CheckpointID, deadline int64) {
	c.addTimer(deadline, func(now int64) error {
		if uh, ok := c.handler.(barrier.UnalignedHandler); ok {
			uh.Tick(now)
		}
		return c.err()
	})
}

// dropState aborts and forgets the channel state of id and older.
func (c *checkpointer) dropState(id barrier.CheckpointID) {
	for sid, s := range c.states {
		if sid <= id {
			if c.t.cfg.Gate != nil {
				c.stopPersisting(sid)
			}
			s.abort()
			delete(c.states, sid)
		}
	}
}

// ChannelStatePending implements barrier.RouterController: the channel
// state of id is still recording (its inputs or outputs are not final).
func (c *checkpointer) ChannelStatePending(id barrier.CheckpointID) bool {
	s := c.states[id]
	if s == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// ckptTimer is a deadline in the task's mailbox loop (unix ms).
type ckptTimer struct {
	at   int64
	fire func(now int64) error
}

func (c *checkpointer) addTimer(at int64, fire func(now int64) error) {
	c.timers = append(c.timers, ckptTimer{at: at, fire: fire})
	c.t.ckptNext = min(c.t.ckptNext, at)
}

// fireTimers runs the timers due at now.
func (c *checkpointer) fireTimers(now int64) error {
	due := c.timers[:0:0]
	keep := c.timers[:0]
	for _, tm := range c.timers {
		if tm.at <= now {
			due = append(due, tm)
		} else {
			keep = append(keep, tm)
		}
	}
	c.timers = keep
	c.t.ckptNext = noTime
	for _, tm := range c.timers {
		c.t.ckptNext = min(c.t.ckptNext, tm.at)
	}
	for _, tm := range due {
		if err := tm.fire(now); err != nil {
			return err
		}
	}
	return nil
}

// newHandler returns the task's barrier handler over n channels.
func newHandler(cfg *CheckpointConfig, n int, c *checkpointer) (barrier.Handler, error) {
	if cfg.Mode == barrier.AtLeastOnce || cfg.Alignment == barrier.Aligned {
		return barrier.New(cfg.Mode, n, c)
	}
	// Savepoints stay aligned: a barrier.Router sends them to an aligned
	// handler and the checkpoints to the unaligned one.
	return barrier.NewRouter(barrier.Config{Mode: cfg.Mode, Alignment: cfg.Alignment, AlignmentTimeout: cfg.AlignmentTimeout}, n, c)
}

// onPriorityBarrier hands barrier b, which arrived on ch as a priority
// event, to the handler.
func (c *checkpointer) onPriorityBarrier(ch int, b barrier.Barrier) error {
	if uh, ok := c.handler.(barrier.UnalignedHandler); ok {
		uh.ProcessPriorityBarrier(barrier.ChannelIndex(ch), b)
		return c.err()
	}
	return c.onBarrier(ch, b)
}

// onAnnouncement hands the announcement of barrier b on ch to the
// handler.
func (c *checkpointer) onAnnouncement(ch int, b barrier.Barrier) error {
	if uh, ok := c.handler.(barrier.UnalignedHandler); ok {
		uh.ProcessAnnouncement(barrier.ChannelIndex(ch), b)
	}
	return c.err()
}

// waitChannelState waits, in the asynchronous part of a snapshot, for the
// channel state of s and writes it; nil if it was aborted (or the task
// stopped: then err says so).
func (t *Task) writeChannelState(ctx context.Context, s *channelState) (*state.ChannelStateHandle, bool, error) {
	select {
	case <-s.done:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	cs, ok := s.result()
	if !ok {
		return nil, false, nil
	}
	h, err := state.WriteChannelState(t.ckpt.cfg.Storage.ForOwner(state.FileOwner{Vertex: t.cfg.Key.Vertex, Subtask: t.cfg.Key.Subtask}), s.id, fileSafe(t.cfg.Key.Vertex)+fmt.Sprintf("-%d-channels", t.cfg.Key.Subtask), cs)
	if err != nil {
		return nil, true, fmt.Errorf("channel state: %w", err)
	}
	h.Inputs = t.inputEdges()
	return h, true, nil
}

// emitBarrier sends barrier b to every output as its checkpoint needs and
// returns the channel state the snapshot must wait for (nil: none):
//
//   - at-least-once: a plain event, in band;
//   - aligned: an aligned barrier, in band;
//   - unaligned: a priority event that overtakes every output queue, the
//     buffers it overtakes becoming the output side of the channel state
//     (and the input side follows from PersistChannel, for a task with
//     inputs whose handler triggered it);
//   - aligned with a timeout: a timeoutable barrier, in band; if it still
//     waits in an output queue when the timeout expires (counted from the
//     checkpoint's timestamp), it is turned into a priority event there
//     (Flink's output-side aligned-checkpoint timeout), so that a consumer
//     behind a full queue learns of the checkpoint.
func (t *Task) emitBarrier(b barrier.Barrier) *channelState {
	c := t.ckpt
	c.prune()
	payload := barrierPayload(b)
	switch {
	case c.cfg.Mode == barrier.AtLeastOnce:
		t.broadcastEvent(payload, buffer.Event)
		return nil
	case b.Options.Alignment == barrier.Unaligned:
		s := t.newChannelState(b.ID, t.cfg.Gate != nil && !t.inputEnded, 0)
		for i, p := range t.cfg.Outputs {
			if p.AlignedBarriers() {
				p.BroadcastEvent(payload, buffer.AlignedBarrier)
			} else {
				p.BroadcastPriorityEvent(payload, s.outputRecorders(i))
			}
		}
		return s
	case b.Options.Alignment == barrier.AlignedWithTimeout && len(t.cfg.Outputs) > 0:
		timeoutable := 0
		for _, p := range t.cfg.Outputs {
			if !p.AlignedBarriers() {
				timeoutable++
			}
		}
		s := t.newChannelState(b.ID, false, timeoutable)
		for _, p := range t.cfg.Outputs {
			if p.AlignedBarriers() {
				p.BroadcastEvent(payload, buffer.AlignedBarrier)
				continue
			}
			p.WatchBarrier(b.ID, s.outputDone)
			p.BroadcastEvent(payload, buffer.TimeoutableAlignedBarrier)
		}
		u := b
		u.Options.Alignment, u.Options.AlignmentTimeout = barrier.Unaligned, 0
		unaligned := barrierPayload(u)
		c.addTimer(b.Timestamp+b.Options.AlignmentTimeout.Milliseconds(), func(int64) error {
			if c.states[b.ID] != s {
				return nil // aborted, or complete: every barrier is gone
			}
			for i, p := range t.cfg.Outputs {
				if !p.AlignedBarriers() {
					p.ConvertBarrier(b.ID, unaligned, s.outputRecorders(i))
				}
			}
			return nil
		})
		return s
	}
	t.broadcastEvent(payload, buffer.AlignedBarrier)
	return nil
}

// newChannelState starts recording the channel state of checkpoint id.
func (t *Task) newChannelState(id barrier.CheckpointID, inputsOpen bool, pendingOutputs int) *channelState {
	inputs := 0
	if t.cfg.Gate != nil {
		inputs = t.cfg.Gate.NumChannels()
	}
	outs := make([]int, len(t.cfg.Outputs))
	for i, p := range t.cfg.Outputs {
		outs[i] = p.NumSubpartitions()
	}
	s := newChannelState(id, inputs, outs, inputsOpen, pendingOutputs)
	t.ckpt.states[id] = s
	return s
}

// outputRecorders returns the recorders of output partition part's
// subpartitions.
func (s *channelState) outputRecorders(part int) func(sub int) network.Recorder {
	return func(sub int) network.Recorder { return stateRecorder{s: s, output: true, part: part, index: sub} }
}

// prune forgets the channel states that are complete (their snapshots
// hold them).
func (c *checkpointer) prune() {
	for id, s := range c.states {
		select {
		case <-s.done:
			delete(c.states, id)
		default:
		}
	}
}

// midBuffer takes the priority items of the input gate (unaligned
// barriers, announcements) and fires due checkpoint timers between two
// records of a buffer.
func (t *Task) midBuffer() error {
	if err := t.takePriority(); err != nil {
		return err
	}
	if t.ckptNext != noTime {
		if now := time.Now().UnixMilli(); now >= t.ckptNext {
			return t.ckpt.fireTimers(now)
		}
	}
	return nil
}

// takePriority handles every priority item waiting in the input gate.
func (t *Task) takePriority() error {
	for {
		ch, b, err := t.cfg.Gate.PollPriority()
		if err != nil {
			return t.wrapErr(err)
		}
		if b == nil {
			return nil
		}
		err = t.handleEvent(ch, b)
		b.Release()
		if err != nil {
			return err
		}
	}
}

// overdrawn reports whether an output took an overdraft buffer: the task
// must wait for room before it takes more input.
func (t *Task) overdrawn() bool {
	for _, p := range t.cfg.Outputs {
		if p.Overdrawn() {
			return true
		}
	}
	return false
}

// waitForOutputs waits, with full outputs, for room or for a priority
// item (an unaligned barrier is taken even while the outputs are full).
func (t *Task) waitForOutputs(ctx context.Context) error {
	if err := t.takePriority(); err != nil {
		return err
	}
	ch := t.outputsBlocked()
	if ch == nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return t.waitEither(ctx, ch, t.cfg.Gate.Ready(), true)
}
