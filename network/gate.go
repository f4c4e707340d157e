package network

import (
	"errors"
	"fmt"
	"sync"

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
	// available right away.
	Poll() (b *buffer.Buffer, more bool, err error)
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

	mu struct {
		sync.Mutex
		queue    []int // channels with data, FIFO
		head     int
		enqueued []bool
		err      error
		closed   bool
	}
}

// NewInputGate returns a gate over channels; call Start before polling.
func NewInputGate(name string, channels []InputChannel) *InputGate {
	g := &InputGate{name: name, channels: channels, ready: make(chan struct{}, 1)}
	g.mu.enqueued = make([]bool, len(channels))
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

// PollNext returns the next buffer of any channel with data, round robin,
// and its channel index; b is nil when no channel has data right now.
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
		if g.mu.head == len(g.mu.queue) {
			g.mu.Unlock()
			return 0, nil, nil
		}
		i := g.mu.queue[g.mu.head]
		g.mu.head++
		g.mu.enqueued[i] = false
		g.mu.Unlock()

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
}

// NewLocalChannel returns a channel that will read sub.
func NewLocalChannel(name string, sub *Subpartition) *LocalChannel {
	return &LocalChannel{name: name, sub: sub}
}

func (c *LocalChannel) Name() string { return c.name }

func (c *LocalChannel) Start(g *InputGate, index int) error {
	c.gate, c.idx = g, index
	return c.sub.Attach(c)
}

// NotifyDataAvailable implements Listener.
func (c *LocalChannel) NotifyDataAvailable() { c.gate.NotifyChannel(c.idx) }

func (c *LocalChannel) Poll() (*buffer.Buffer, bool, error) {
	r := c.sub.Poll()
	return r.Buffer, r.More, nil
}

func (c *LocalChannel) Resume() { c.sub.Resume() }

func (c *LocalChannel) Release() { c.sub.Release() }
