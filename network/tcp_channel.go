package network

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/network/credit"
	"github.com/weirstream/weir/network/wire"
)

// Remote buffer defaults (Flink's taskmanager.network.memory.buffers-per-
// channel and floating-buffers-per-gate).
const (
	DefaultExclusiveBuffers = 2
	DefaultFloatingBuffers  = 8
)

// RemoteBuffersConfig sizes a RemoteBuffers. Zero values mean the
// defaults; set NoFloating for a gate without floating buffers.
type RemoteBuffersConfig struct {
	Exclusive  int // per channel; default 2
	Floating   int // per gate; default 8
	NoFloating bool
}

// WithDefaults returns c with zero values replaced by the defaults.
func (c RemoteBuffersConfig) WithDefaults() RemoteBuffersConfig {
	if c.Exclusive == 0 {
		c.Exclusive = DefaultExclusiveBuffers
	}
	if c.Floating == 0 && !c.NoFloating {
		c.Floating = DefaultFloatingBuffers
	}
	if c.NoFloating {
		c.Floating = 0
	}
	return c
}

// Validate reports a value out of range.
func (c RemoteBuffersConfig) Validate() error {
	c = c.WithDefaults()
	if c.Exclusive < 1 || c.Exclusive > credit.MaxCredit {
		return fmt.Errorf("network: remote buffers: exclusive buffers %d out of range", c.Exclusive)
	}
	if c.Floating < 0 {
		return fmt.Errorf("network: remote buffers: negative floating buffers %d", c.Floating)
	}
	return nil
}

// RemoteBuffers is the receive memory of one input gate's remote channels
// (Flink's BufferManagers plus the gate's floating pool): every channel's
// exclusive buffers and the gate's floating buffers, as segments of one
// buffer.LocalPool, with the credit accounting of credit.Pool and
// credit.Channel. A segment handed to the consumer returns to the pool
// when released; a watcher goroutine takes it straight back and turns it
// into credit for the channel that received it.
//
// Create one per gate, create its channels (NewRemoteChannel), then start
// the gate. The pool must be able to hand out channels×Exclusive+Floating
// segments. After the gate is closed, the consumer released its buffers
// and the ConnectionManager is closed, close the pool.
type RemoteBuffers struct {
	pool *buffer.LocalPool
	cfg  RemoteBuffersConfig

	mu struct {
		sync.Mutex
		credits  *credit.Pool
		channels []*RemoteChannel // by credit channel index
		free     []*buffer.Buffer
		segs     map[*buffer.Buffer]*segment
		started  bool
		live     int // channels started and not released
		stopped  bool
		scratch  []*credit.Channel
	}
	cancel context.CancelFunc
	done   chan struct{} // closed when the watcher exits
}

// segment is what one pooled segment currently holds.
type segment struct {
	ch   *RemoteChannel
	srcs []credit.Source // one per (partial) data buffer in it
}

// NewRemoteBuffers returns the receive memory of a gate drawing segments
// from pool. It starts nothing.
func NewRemoteBuffers(pool *buffer.LocalPool, cfg RemoteBuffersConfig) (*RemoteBuffers, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	cp, err := credit.NewPool(cfg.Floating)
	if err != nil {
		return nil, err
	}
	rb := &RemoteBuffers{pool: pool, cfg: cfg, done: make(chan struct{})}
	rb.mu.credits = cp
	rb.mu.segs = make(map[*buffer.Buffer]*segment)
	return rb, nil
}

// SegmentSize is the size of every receive buffer.
func (rb *RemoteBuffers) SegmentSize() int { return rb.pool.SegmentSize() }

func (rb *RemoteBuffers) newChannel(ch *RemoteChannel) (*credit.Channel, error) {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.mu.started {
		return nil, errors.New("network: remote buffers: channel added after the gate started")
	}
	cc, err := rb.mu.credits.NewChannel(rb.cfg.Exclusive)
	if err != nil {
		return nil, err
	}
	rb.mu.channels = append(rb.mu.channels, ch)
	return cc, nil
}

// start takes the segments (first channel) and counts a live channel.
func (rb *RemoteBuffers) start() error {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if rb.mu.stopped {
		return errors.New("network: remote buffers: already released")
	}
	if !rb.mu.started {
		need := len(rb.mu.channels)*rb.cfg.Exclusive + rb.cfg.Floating
		if rb.pool.Max() < need {
			return fmt.Errorf("%w: gate needs %d receive buffers (%d channels × %d exclusive + %d floating), pool max is %d",
				buffer.ErrInsufficient, need, len(rb.mu.channels), rb.cfg.Exclusive, rb.cfg.Floating, rb.pool.Max())
		}
		for len(rb.mu.free) < need {
			b, err := rb.pool.Request()
			if err == nil && b == nil {
				err = fmt.Errorf("%w: got %d of %d receive buffers", buffer.ErrInsufficient, len(rb.mu.free), need)
			}
			if err != nil {
				for _, b := range rb.mu.free {
					b.Release()
				}
				rb.mu.free = nil
				return err
			}
			rb.mu.free = append(rb.mu.free, b)
			rb.mu.segs[b] = &segment{}
		}
		rb.mu.started = true
		ctx, cancel := context.WithCancel(context.Background())
		rb.cancel = cancel
		go rb.watch(ctx)
	}
	rb.mu.live++
	return nil
}

// channelDone is called when a started channel is released.
func (rb *RemoteBuffers) channelDone() {
	rb.mu.Lock()
	rb.mu.live--
	last := rb.mu.live == 0 && rb.mu.started && !rb.mu.stopped
	if last {
		rb.mu.stopped = true
	}
	rb.mu.Unlock()
	if !last {
		return
	}
	rb.cancel()
	<-rb.done
	rb.mu.Lock()
	free := rb.mu.free
	rb.mu.free = nil
	rb.mu.Unlock()
	for _, b := range free {
		b.Release()
	}
}

// watch takes back every segment the consumer releases.
func (rb *RemoteBuffers) watch(ctx context.Context) {
	defer close(rb.done)
	for {
		b, err := rb.pool.RequestBlocking(ctx)
		if err != nil {
			return
		}
		rb.recycled(b)
	}
}

// recycled turns a segment released by the consumer into credit.
func (rb *RemoteBuffers) recycled(b *buffer.Buffer) {
	rb.mu.Lock()
	s, ok := rb.mu.segs[b]
	if !ok {
		s = &segment{} // the pool grew beyond what was taken at start
		rb.mu.segs[b] = s
	}
	for _, src := range s.srcs {
		s.ch.cc.Recycle(src)
	}
	s.ch, s.srcs = nil, s.srcs[:0]
	rb.mu.free = append(rb.mu.free, b)
	rb.dispatchLocked()
	rb.mu.Unlock()
}

// dispatchLocked hands every channel with new unannounced credit to its
// connection's writer, which sends it as one ADD_CREDIT. Lock order:
// RemoteBuffers.mu, then RemoteChannel.mu, then clientConn.mu.
func (rb *RemoteBuffers) dispatchLocked() {
	rb.mu.scratch = rb.mu.credits.Credited(rb.mu.scratch[:0])
	for i, cc := range rb.mu.scratch {
		ch := rb.mu.channels[cc.Index()]
		rb.mu.scratch[i] = nil
		if c := ch.connection(); c != nil {
			c.wantCredit(ch)
		}
	}
}

// RemoteChannelConfig names what a RemoteChannel reads.
type RemoteChannelConfig struct {
	// Addr is the server's host:port.
	Addr string
	// Partition and Subpartition name the subpartition to read.
	Partition    uuid.UUID
	Subpartition int
	// Receiver identifies the channel on the wire; zero means a random ID.
	Receiver uuid.UUID
}

// RemoteChannel is an InputChannel that reads a subpartition of another
// worker over TCP (Flink's RemoteInputChannel). It requests its
// subpartition with its exclusive buffers as initial credit, reads each
// data buffer straight into one of its gate's segments, checks sequence
// numbers, asks for floating buffers on backlog, returns consumed buffers
// as credit, resumes after aligned barriers and cancels on Release.
//
// Errors of this channel alone (producer failed, sequence gap, partition
// never found) fail only it: its next Poll returns the error. A dropped
// connection, a fatal ERROR_RESPONSE or a protocol error fails every
// channel of that connection.
type RemoteChannel struct {
	name     string
	cfg      RemoteChannelConfig
	receiver uuid.UUID
	cm       *ConnectionManager
	rb       *RemoteBuffers
	cc       *credit.Channel // guarded by rb.mu

	gate *InputGate
	idx  int

	creditQueued bool // guarded by conn.mu

	mu struct {
		sync.Mutex
		conn  *clientConn
		queue []*buffer.Buffer
		head  int
		unaligned
		err      error
		ended    bool // end of partition received
		released bool
		started  bool
		blocked  bool // delivered an aligned barrier, not resumed
		backoff  time.Duration
		timer    *time.Timer
	}
}

// NewRemoteChannel returns a channel of the gate whose receive memory is
// rb, reading cfg's subpartition through cm. name appears in errors.
func NewRemoteChannel(name string, cm *ConnectionManager, rb *RemoteBuffers, cfg RemoteChannelConfig) (*RemoteChannel, error) {
	if cfg.Addr == "" {
		return nil, fmt.Errorf("network: remote channel %s: no address", name)
	}
	if cfg.Subpartition < 0 || int64(cfg.Subpartition) > 1<<32-1 {
		return nil, fmt.Errorf("network: remote channel %s: subpartition %d out of range", name, cfg.Subpartition)
	}
	if cfg.Receiver == uuid.Nil {
		cfg.Receiver = uuid.New()
	}
	ch := &RemoteChannel{name: name, cfg: cfg, receiver: cfg.Receiver, cm: cm, rb: rb}
	cc, err := rb.newChannel(ch)
	if err != nil {
		return nil, fmt.Errorf("network: remote channel %s: %w", name, err)
	}
	ch.cc = cc
	return ch, nil
}

// Name implements InputChannel.
func (ch *RemoteChannel) Name() string { return ch.name }

// Receiver is the channel's ID on the wire.
func (ch *RemoteChannel) Receiver() uuid.UUID { return ch.receiver }

func (ch *RemoteChannel) connection() *clientConn {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.mu.released || ch.mu.err != nil {
		return nil
	}
	return ch.mu.conn
}

func (ch *RemoteChannel) request() wire.PartitionRequest {
	return wire.PartitionRequest{Partition: ch.cfg.Partition, Subpartition: uint32(ch.cfg.Subpartition),
		Receiver: ch.receiver, InitialCredit: ch.cc.InitialCredit()}
}

// Start implements InputChannel: it takes the gate's receive memory,
// connects (dialling if needed) and sends PARTITION_REQUEST.
func (ch *RemoteChannel) Start(g *InputGate, index int) error {
	ch.gate, ch.idx = g, index
	ch.mu.Lock()
	if ch.mu.started || ch.mu.released {
		ch.mu.Unlock()
		return fmt.Errorf("network: remote channel %s: started twice or after release", ch.name)
	}
	ch.mu.started = true
	ch.mu.Unlock()
	if err := ch.rb.start(); err != nil {
		ch.mu.Lock()
		ch.mu.started = false
		ch.mu.Unlock()
		return err
	}
	c, err := ch.cm.connection(ch.cfg.Addr)
	if err == nil {
		ch.mu.Lock()
		ch.mu.conn = c
		ch.mu.Unlock()
		err = c.register(ch, ch.request())
	}
	if err != nil {
		ch.fail(err, false)
		return nil // reported by Poll, like any later failure
	}
	return nil
}

// onBuffer handles a BUFFER_RESPONSE for this channel, reading its payload
// (connection reader goroutine). It returns an error only for the
// connection: a protocol error or a read failure.
func (ch *RemoteChannel) onBuffer(rd *wire.Reader, h *wire.BufferResponseHeader) error {
	if h.Flags&wire.FlagCompressed != 0 {
		return &wire.ProtocolError{Type: wire.TypeBufferResponse, Reason: "compressed payload, but compression was not offered"}
	}
	if !h.DataType.IsData() {
		return ch.onEvent(rd, h)
	}
	rb := ch.rb
	segSize := rb.pool.SegmentSize()
	if int64(h.Size) > int64(segSize) {
		return &wire.ProtocolError{Type: wire.TypeBufferResponse,
			Reason: fmt.Sprintf("payload of %d bytes exceeds the %d-byte buffer", h.Size, segSize)}
	}
	k := h.Buffers()
	rb.mu.Lock()
	cc := ch.cc
	if cc.Released() {
		rb.mu.Unlock()
		return rd.DiscardPayload()
	}
	var chErr error
	for i := 0; i < k; i++ {
		if err := cc.Receive(h.Sequence + uint32(i)); err != nil {
			chErr = err
			break
		}
	}
	if chErr == nil && cc.Available()-cc.Unannounced() < k {
		chErr = fmt.Errorf("%w: %d data buffers, %d announced credit", credit.ErrNoCredit, k, cc.Available()-cc.Unannounced())
	}
	if chErr != nil {
		rb.mu.Unlock()
		ch.fail(fmt.Errorf("network: remote channel %s: %w", ch.name, chErr), true)
		return rd.DiscardPayload()
	}
	n := len(rb.mu.free)
	b := rb.mu.free[n-1] // credit guarantees a free segment
	rb.mu.free[n-1] = nil
	rb.mu.free = rb.mu.free[:n-1]
	s := rb.mu.segs[b]
	s.ch = ch
	for i := 0; i < k; i++ {
		src, err := cc.Take()
		if err != nil {
			panic(fmt.Sprintf("network: credit checked but Take failed: %v", err))
		}
		s.srcs = append(s.srcs, src)
	}
	rb.mu.Unlock()

	if err := rd.ReadPayload(b.Segment()[:h.Size]); err != nil {
		b.Release()
		return err
	}
	b.SetLen(int(h.Size))
	b.SetType(buffer.Data)

	rb.mu.Lock()
	if !cc.Released() {
		cc.OnBacklog(uint32(h.Backlog))
	}
	rb.dispatchLocked()
	rb.mu.Unlock()

	if len(h.Partials) == 0 {
		ch.push(b)
		return nil
	}
	off := 0
	for _, sz := range h.Partials {
		ch.push(b.Slice(off, int(sz), buffer.Data))
		off += int(sz)
	}
	b.Release() // the slices hold the segment now
	return nil
}

func (ch *RemoteChannel) onEvent(rd *wire.Reader, h *wire.BufferResponseHeader) error {
	rb := ch.rb
	rb.mu.Lock()
	cc := ch.cc
	if cc.Released() {
		rb.mu.Unlock()
		return rd.DiscardPayload()
	}
	if err := cc.Receive(h.Sequence); err != nil {
		rb.mu.Unlock()
		ch.fail(fmt.Errorf("network: remote channel %s: %w", ch.name, err), true)
		return rd.DiscardPayload()
	}
	cc.OnBacklog(uint32(h.Backlog))
	rb.dispatchLocked()
	rb.mu.Unlock()

	p := make([]byte, h.Size)
	if err := rd.ReadPayload(p); err != nil {
		return err
	}
	if len(p) > 0 && wire.EventKind(p[0]) == wire.EventAnnouncement {
		// weir's client announces the barriers it receives itself (see
		// push); an announcement from the server is a hint it does not
		// need.
		return nil
	}
	end := len(p) > 0 && wire.EventKind(p[0]) == wire.EventEndOfPartition
	if end {
		// The server released its reader: this channel is done on the
		// wire, whatever happens to the connection later.
		ch.mu.Lock()
		ch.mu.ended = true
		c := ch.mu.conn
		ch.mu.Unlock()
		if c != nil {
			c.unregister(ch, false)
		}
		rb.mu.Lock()
		cc.Release()
		rb.dispatchLocked()
		rb.mu.Unlock()
	}
	ch.push(buffer.Wrap(p, buffer.DataType(h.DataType)))
	return nil
}

func (ch *RemoteChannel) onBacklog(backlog uint32) {
	rb := ch.rb
	rb.mu.Lock()
	if !ch.cc.Released() {
		ch.cc.OnBacklog(backlog)
	}
	rb.dispatchLocked()
	rb.mu.Unlock()
}

// onError handles an ERROR_RESPONSE for this channel.
func (ch *RemoteChannel) onError(class wire.ErrorClass, msg string) {
	rerr := &RemoteError{Addr: ch.cfg.Addr, Class: class, Message: msg}
	if class != wire.ClassPartitionNotFound {
		ch.fail(fmt.Errorf("network: remote channel %s: %w", ch.name, rerr), false)
		return
	}
	cfg := &ch.cm.cfg
	ch.mu.Lock()
	if ch.mu.released || ch.mu.err != nil {
		ch.mu.Unlock()
		return
	}
	switch {
	case ch.mu.backoff == 0:
		ch.mu.backoff = cfg.RetryInitialBackoff
	case ch.mu.backoff < cfg.RetryMaxBackoff:
		ch.mu.backoff = min(2*ch.mu.backoff, cfg.RetryMaxBackoff)
	default:
		ch.mu.Unlock()
		ch.fail(fmt.Errorf("network: remote channel %s: partition still not found after retrying: %w", ch.name, rerr), false)
		return
	}
	c := ch.mu.conn
	ch.mu.timer = time.AfterFunc(ch.mu.backoff, func() { c.request(ch.request()) })
	ch.mu.Unlock()
}

// push queues a received buffer for the gate: a priority event ahead of
// the queue, anything else at its end (and, for a timeoutable barrier, an
// announcement of it ahead of the queue).
func (ch *RemoteChannel) push(b *buffer.Buffer) {
	ch.mu.Lock()
	if ch.mu.released || ch.mu.err != nil {
		ch.mu.Unlock()
		b.Release()
		return
	}
	if b.IsData() && ch.mu.rec == nil {
		ch.appendLocked(b)
		ch.mu.Unlock()
		ch.gate.NotifyChannel(ch.idx)
		return
	}
	if ch.pushLocked(b) {
		ch.mu.Unlock()
		ch.gate.NotifyPriority(ch.idx)
		return
	}
	ch.mu.Unlock()
	ch.gate.NotifyChannel(ch.idx)
}

func (ch *RemoteChannel) appendLocked(b *buffer.Buffer) {
	if ch.mu.head > 0 && ch.mu.head == len(ch.mu.queue) {
		ch.mu.queue, ch.mu.head = ch.mu.queue[:0], 0
	}
	ch.mu.queue = append(ch.mu.queue, b)
	ch.mu.arrived++
}

// fail fails the channel with err (unless it already ended): queued
// buffers are dropped and the next Poll returns err. cancel sends
// CANCEL_PARTITION (the server's reader is still active).
func (ch *RemoteChannel) fail(err error, cancel bool) {
	ch.mu.Lock()
	if ch.mu.released || ch.mu.err != nil || ch.mu.ended {
		ch.mu.Unlock()
		return
	}
	ch.mu.err = err
	q := ch.drainLocked()
	c := ch.mu.conn
	if ch.mu.timer != nil {
		ch.mu.timer.Stop()
	}
	ch.mu.Unlock()
	for _, b := range q {
		b.Release()
	}
	if c != nil {
		c.unregister(ch, cancel)
	}
	rb := ch.rb
	rb.mu.Lock()
	ch.cc.Release()
	rb.dispatchLocked()
	rb.mu.Unlock()
	if ch.gate != nil {
		ch.gate.NotifyChannel(ch.idx)
	}
}

func (ch *RemoteChannel) drainLocked() []*buffer.Buffer {
	q := append(ch.mu.prio, ch.mu.queue[ch.mu.head:]...)
	ch.mu.queue, ch.mu.head, ch.mu.prio = nil, 0, nil
	ch.mu.rec = nil
	return q
}

// Poll implements InputChannel. It returns the channel's failure, if any.
func (ch *RemoteChannel) Poll() (*buffer.Buffer, bool, error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.mu.err != nil {
		return nil, false, ch.mu.err
	}
	if len(ch.mu.prio) > 0 {
		b := ch.popPriorityLocked()
		return b, len(ch.mu.prio) > 0 || ch.mu.head < len(ch.mu.queue), nil
	}
	if ch.mu.head == len(ch.mu.queue) {
		return nil, false, nil
	}
	b := ch.mu.queue[ch.mu.head]
	ch.mu.queue[ch.mu.head] = nil
	ch.mu.head++
	ch.mu.polled++
	if b.Type().BlocksUpstream() {
		ch.mu.blocked = true
	}
	return b, ch.mu.head < len(ch.mu.queue), nil
}

// PollPriority implements InputChannel.
func (ch *RemoteChannel) PollPriority() (*buffer.Buffer, error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.mu.err != nil {
		return nil, ch.mu.err
	}
	if len(ch.mu.prio) == 0 {
		return nil, nil
	}
	return ch.popPriorityLocked(), nil
}

// Resume implements InputChannel: after an aligned barrier was polled it
// sends RESUME_CONSUMPTION.
func (ch *RemoteChannel) Resume() {
	ch.mu.Lock()
	if !ch.mu.blocked || ch.mu.released || ch.mu.err != nil || ch.mu.ended {
		ch.mu.Unlock()
		return
	}
	ch.mu.blocked = false
	c := ch.mu.conn
	ch.mu.Unlock()
	if c != nil {
		c.resume(ch)
	}
}

// Release implements InputChannel: it cancels the subpartition if it has
// not ended, drops queued buffers and gives back the channel's credit.
// Buffers the consumer still holds return when it releases them.
func (ch *RemoteChannel) Release() {
	ch.mu.Lock()
	if ch.mu.released {
		ch.mu.Unlock()
		return
	}
	ch.mu.released = true
	started := ch.mu.started
	active := ch.mu.err == nil && !ch.mu.ended
	q := ch.drainLocked()
	c := ch.mu.conn
	if ch.mu.timer != nil {
		ch.mu.timer.Stop()
	}
	ch.mu.Unlock()
	for _, b := range q {
		b.Release()
	}
	if c != nil && active {
		c.unregister(ch, true)
	}
	rb := ch.rb
	rb.mu.Lock()
	ch.cc.Release()
	rb.dispatchLocked()
	rb.mu.Unlock()
	if started {
		rb.channelDone()
	}
}

// takeCredit returns the credit to announce now (connection writer).
func (ch *RemoteChannel) takeCredit() int {
	rb := ch.rb
	rb.mu.Lock()
	defer rb.mu.Unlock()
	if ch.cc.Released() {
		return 0
	}
	return ch.cc.TakeUnannouncedCredit()
}
