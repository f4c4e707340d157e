package network

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/buffer"
)

// ErrGateClosed is returned by a gate's PollNext after Close.
var ErrGateClosed = errors.New("network: input gate closed")

// InputChannel is one input of a gate: a local channel reading a
// subpartition of this process, or a remote channel reading one over TCP.
// The gate is its only caller, from the consuming task's goroutine, except
// where a method says otherwise.
type InputChannel interface {
	// Name identifies the channel in errors.
	Name() string
	// Start begins consuming: the channel requests its subpartition and
	// will call the gate's NotifyChannel when it has buffers.
	Start(g *InputGate, index int) error
	// Poll returns the next buffer (nil if none) and whether more are
	// available right away. Priority items (unaligned barriers,
	// announcements) come first.
	Poll() (b *buffer.Buffer, more bool, err error)
	// PollPriority returns the next buffer only if it is a priority item
	// (nil otherwise): the task takes these while its outputs are full.
	PollPriority() (*buffer.Buffer, error)
	// Resume resumes consumption after an aligned barrier.
	Resume()
	// Release stops consuming and releases everything the channel holds.
	// Safe to call more than once.
	Release()
}

// InputGate merges a task's input channels. Channels that have buffers
// queue themselves (NotifyChannel, from any goroutine); the task polls the
// gate (PollNext) and, when nothing is there, waits on Ready. A lock is
// taken once per buffer, never per record.
type InputGate struct {
	name     string
	channels []InputChannel
	ready    chan struct{} // capacity 1: something was queued
	// priority mirrors "mu.prio is not empty" for a check without the
	// lock (PriorityPending).
	priority atomic.Bool

	mu struct {
		sync.Mutex
		queue    []int // channels with data, FIFO
		head     int
		enqueued []bool
		// prio lists the channels with a priority item, FIFO; they are
		// served before queue.
		prio         []int
		prioEnqueued []bool
		err          error
		closed       bool
	}
}

// NewInputGate returns a gate over channels; call Start before polling.
func NewInputGate(name string, channels []InputChannel) *InputGate {
	g := &InputGate{name: name, channels: channels, ready: make(chan struct{}, 1)}
	g.mu.enqueued = make([]bool, len(channels))
	g.mu.prioEnqueued = make([]bool, len(channels))
	return g
}

// Name is the gate's name.
func (g *InputGate) Name() string { return g.name }

// NumChannels is the number of input channels.
func (g *InputGate) NumChannels() int { return len(g.channels) }

// Channel returns channel i.
func (g *InputGate) Channel(i int) InputChannel { return g.channels[i] }

// Start starts every channel.
func (g *InputGate) Start() error {
	for i, c := range g.channels {
		if err := c.Start(g, i); err != nil {
			return fmt.Errorf("network: gate %s: starting channel %s: %w", g.name, c.Name(), err)
		}
	}
	return nil
}

// NotifyChannel queues channel i as having data. Safe from any goroutine.
func (g *InputGate) NotifyChannel(i int) {
	g.mu.Lock()
	if g.mu.closed || g.mu.enqueued[i] {
		g.mu.Unlock()
		return
	}
	g.mu.enqueued[i] = true
	g.pushLocked(i)
	g.mu.Unlock()
	g.signal()
}

func (g *InputGate) pushLocked(i int) {
	if g.mu.head > 0 && g.mu.head == len(g.mu.queue) {
		g.mu.queue, g.mu.head = g.mu.queue[:0], 0
	}
	g.mu.queue = append(g.mu.queue, i)
}

func (g *InputGate) signal() {
	select {
	case g.ready <- struct{}{}:
	default:
	}
}

// Fail fails the gate: the next PollNext returns err. Safe from any
// goroutine; the first error wins.
func (g *InputGate) Fail(err error) {
	g.mu.Lock()
	if g.mu.err == nil {
		g.mu.err = err
	}
	g.mu.Unlock()
	g.signal()
}

// Ready returns a channel that receives after a channel queued itself or
// the gate failed. The task waits on it when PollNext found nothing.
func (g *InputGate) Ready() <-chan struct{} { return g.ready }

// NotifyPriority queues channel i as having a priority item: it is
// served before the channels queued by NotifyChannel. Safe from any
// goroutine.
func (g *InputGate) NotifyPriority(i int) {
	g.mu.Lock()
	if g.mu.closed || g.mu.prioEnqueued[i] {
		g.mu.Unlock()
		return
	}
	g.mu.prioEnqueued[i] = true
	g.mu.prio = append(g.mu.prio, i)
	g.priority.Store(true)
	g.mu.Unlock()
	g.signal()
}

// PriorityPending reports, without taking the gate's lock, whether some
// channel announced a priority item not yet taken: a task that is busy
// with a buffer checks it now and then, to take an unaligned barrier
// before it finishes the buffer.
func (g *InputGate) PriorityPending() bool { return g.priority.Load() }

// popPriorityLocked takes the first channel with a priority item, or -1.
func (g *InputGate) popPriorityLocked() int {
	if len(g.mu.prio) == 0 {
		return -1
	}
	i := g.mu.prio[0]
	copy(g.mu.prio, g.mu.prio[1:])
	g.mu.prio = g.mu.prio[:len(g.mu.prio)-1]
	g.mu.prioEnqueued[i] = false
	if len(g.mu.prio) == 0 {
		g.priority.Store(false)
	}
	return i
}

// PollNext returns the next buffer of any channel with data, round robin
// (channels with a priority item first), and its channel index; b is nil
// when no channel has data right now.
func (g *InputGate) PollNext() (ch int, b *buffer.Buffer, err error) {
	for {
		g.mu.Lock()
		if g.mu.err != nil {
			err := g.mu.err
			g.mu.Unlock()
			return 0, nil, err
		}
		if g.mu.closed {
			g.mu.Unlock()
			return 0, nil, ErrGateClosed
		}
		i := -1
		if len(g.mu.prio) > 0 {
			i = g.popPriorityLocked()
		} else if g.mu.head < len(g.mu.queue) {
			i = g.mu.queue[g.mu.head]
			g.mu.head++
			g.mu.enqueued[i] = false
		}
		g.mu.Unlock()
		if i < 0 {
			return 0, nil, nil
		}

		b, more, err := g.channels[i].Poll()
		if err != nil {
			return i, nil, fmt.Errorf("network: gate %s channel %s: %w", g.name, g.channels[i].Name(), err)
		}
		if more {
			g.NotifyChannel(i)
		}
		if b != nil {
			return i, b, nil
		}
	}
}

// PollPriority returns the next priority item of a channel that has one
// (and its index), or a nil buffer: unlike PollNext it never hands out
// data. The task uses it while its outputs have no room.
func (g *InputGate) PollPriority() (ch int, b *buffer.Buffer, err error) {
	for {
		g.mu.Lock()
		if g.mu.err != nil {
			err := g.mu.err
			g.mu.Unlock()
			return 0, nil, err
		}
		if g.mu.closed {
			g.mu.Unlock()
			return 0, nil, ErrGateClosed
		}
		i := g.popPriorityLocked()
		g.mu.Unlock()
		if i < 0 {
			return 0, nil, nil
		}
		b, err := g.channels[i].PollPriority()
		if err != nil {
			return i, nil, fmt.Errorf("network: gate %s channel %s: %w", g.name, g.channels[i].Name(), err)
		}
		// The channel may hold more, or data only: let PollNext look.
		g.NotifyChannel(i)
		if b != nil {
			return i, b, nil
		}
	}
}

// Resume resumes channel i after an aligned barrier.
func (g *InputGate) Resume(i int) { g.channels[i].Resume() }

// Close releases every channel. Idempotent.
func (g *InputGate) Close() {
	g.mu.Lock()
	if g.mu.closed {
		g.mu.Unlock()
		return
	}
	g.mu.closed = true
	g.mu.Unlock()
	for _, c := range g.channels {
		c.Release()
	}
}

// LocalChannel reads a subpartition of a partition in the same process.
// Buffers are handed over by reference, without copying: the producer's
// pool bounds the memory in flight, and a consumer that stops reading
// stalls its producer.
type LocalChannel struct {
	name string
	sub  *Subpartition
	gate *InputGate
	idx  int

	// The consumer's goroutine only: recording of channel state (rec
	// records the buffers polled until barrier recID) and the newest
	// barrier taken from the channel.
	rec         Recorder
	recID       barrier.CheckpointID
	lastBarrier barrier.CheckpointID
}

// NewLocalChannel returns a channel that will read sub.
func NewLocalChannel(name string, sub *Subpartition) *LocalChannel {
	return &LocalChannel{name: name, sub: sub}
}

func (c *LocalChannel) Name() string { return c.name }

func (c *LocalChannel) Start(g *InputGate, index int) error {
	c.gate, c.idx = g, index
	c.sub.mu.Lock()
	c.sub.mu.announce = true
	c.sub.mu.Unlock()
	return c.sub.Attach(c)
}

// NotifyDataAvailable implements Listener.
func (c *LocalChannel) NotifyDataAvailable() { c.gate.NotifyChannel(c.idx) }

// NotifyPriority implements Listener.
func (c *LocalChannel) NotifyPriority() { c.gate.NotifyPriority(c.idx) }

func (c *LocalChannel) Poll() (*buffer.Buffer, bool, error) {
	r := c.sub.Poll()
	if b := r.Buffer; b != nil && (c.rec != nil || !b.IsData()) {
		c.polled(b)
	}
	return r.Buffer, r.More, nil
}

// PollPriority implements InputChannel.
func (c *LocalChannel) PollPriority() (*buffer.Buffer, error) {
	b := c.sub.pollPriority()
	if b != nil {
		c.polled(b)
	}
	return b, nil
}

// polled notes a barrier taken from the channel and records what the
// channel state of a pending unaligned checkpoint needs.
func (c *LocalChannel) polled(b *buffer.Buffer) {
	if id, ok := BarrierID(b); ok {
		c.lastBarrier = max(c.lastBarrier, id)
		if c.rec != nil && id >= c.recID {
			c.rec = nil
		}
		return
	}
	if c.rec != nil {
		c.rec.Record(b)
	}
}

// Persist starts recording the channel's in-flight data into the channel
// state of unaligned checkpoint id (barrier.UnalignedController's
// PersistChannel). The channel's queue is its producer's subpartition:
// what waits there when barrier id arrives is the producer's to record
// (the barrier overtakes it), so without the barrier the channel records
// the buffers it hands out, from now until barrier id. If barrier id
// already waits in the subpartition, in band, the buffers ahead of it are
// recorded now and the producer no longer converts it. Call it from the
// consumer's goroutine, like Poll.
func (c *LocalChannel) Persist(id barrier.CheckpointID, rec Recorder) {
	if c.lastBarrier >= id {
		return // taken already: nothing of id is in flight here
	}
	if c.sub.persistAhead(id, rec) {
		return
	}
	c.rec, c.recID = rec, id
}

// StopPersisting stops recording for checkpoint id (complete or aborted).
func (c *LocalChannel) StopPersisting(id barrier.CheckpointID) {
	if c.rec != nil && c.recID <= id {
		c.rec = nil
	}
}

// PrioritizeBarrier lets the announced barrier id overtake the buffers
// queued ahead of it (barrier.UnalignedController's PrioritizeBarrier):
// they stay available, what follows the barrier waits for Resume. A
// recording for id ends with the buffers ahead of the barrier.
func (c *LocalChannel) PrioritizeBarrier(id barrier.CheckpointID) {
	var rec Recorder
	if c.rec != nil && c.recID == id {
		rec = c.rec
		c.rec = nil
	}
	if c.sub.prioritizeBarrier(id, rec) {
		c.lastBarrier = max(c.lastBarrier, id)
	}
}

// SetBufferSize asks the producer to cut its buffers for this channel
// at n bytes (buffer debloating; 0: the whole segment).
func (c *LocalChannel) SetBufferSize(n int) { c.sub.SetBufferSize(n) }

// Queued is the number of data buffers waiting in the channel (its
// producer's subpartition).
func (c *LocalChannel) Queued() int { return c.sub.Backlog() }

func (c *LocalChannel) Resume() { c.sub.Resume() }

func (c *LocalChannel) Release() { c.sub.Release() }
