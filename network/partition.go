package network

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/weirstream/weir/buffer"
)

// Listener is told when a subpartition has something to hand out again
// (it went from empty or blocked to non-empty and unblocked). It must not
// block: the producer calls it on its hot path.
type Listener interface {
	NotifyDataAvailable()
	// NotifyPriority says that a priority item (an unaligned barrier, or
	// for a local reader an announcement) waits at the head: the reader
	// should take it before anything else it has to do.
	NotifyPriority()
}

// PartitionStats counts what a partition produced.
type PartitionStats struct {
	Records         int64
	Bytes           int64 // serialized record bytes, including length prefixes
	Buffers         int64
	BackPressured   time.Duration // time the producer waited for a buffer
	BackPressureNum int64         // how many times it waited
}

// ResultPartition is the output of one task attempt towards one consumer
// edge: one Subpartition per consuming subtask, filled by the task's
// goroutine from a bounded LocalPool. A producer that finds the pool empty
// waits (back pressure) until a consumer releases a buffer.
//
// Only the producing task's goroutine may call the write methods (Emit,
// Flush, BroadcastEvent, Finish). Readers may poll subpartitions from any
// goroutine.
type ResultPartition struct {
	id   uuid.UUID
	name string
	pool *buffer.LocalPool
	subs []*Subpartition

	ctx      context.Context // cancels blocking buffer requests
	builders []builder
	scratch  []byte // re-encoding of a record that did not fit
	// held is set when a builder takes a buffer, so Flush has nothing to
	// do while it is false; the record paths never touch it.
	held bool
	// stats holds Buffers, the back-pressure figures and the Bytes of
	// buffers that left their builders; Stats adds the builders' records
	// and unflushed bytes.
	stats    PartitionStats
	finished bool
	rr       int // round-robin position for Rebalance
	// waitStart is when the producer started waiting for a buffer (see
	// BackPressuredFor), 0 while it is not waiting.
	waitStart atomic.Int64
	// alignedOnly: barriers stay in band (SetAlignedBarriers).
	alignedOnly bool
	// overdrawn: the producer took an overdraft buffer and has not found
	// room since (Available); it should wait for room before producing
	// more.
	overdrawn bool
	// wakeBatch (SetWakeBatch) is how many free buffers a producer that
	// found its pool empty waits for; at most 1 waits for one.
	wakeBatch int

	// watch lists the barriers WatchBarrier waits for; watching says
	// whether it ever did (readers skip the lock otherwise).
	watching atomic.Bool
	watch    struct {
		mu   sync.Mutex
		list []*barrierWatch
	}
}

// NewResultPartition creates a partition of n subpartitions drawing buffers
// from pool. The pool must be able to hold at least n+1 buffers. name
// appears in errors and logs.
func NewResultPartition(id uuid.UUID, name string, n int, pool *buffer.LocalPool) (*ResultPartition, error) {
	if n < 1 {
		return nil, fmt.Errorf("network: partition %s: %d subpartitions", name, n)
	}
	if pool.Max() < n+1 {
		return nil, fmt.Errorf("network: partition %s: pool max %d below subpartitions+1 = %d", name, pool.Max(), n+1)
	}
	p := &ResultPartition{id: id, name: name, pool: pool, ctx: context.Background(),
		subs: make([]*Subpartition, n), builders: make([]builder, n), wakeBatch: DefaultWakeBatch}
	for i := range p.subs {
		p.subs[i] = &Subpartition{index: i, parent: p}
		p.builders[i].sub, p.builders[i].part = i, p
		p.builders[i].setFit(1)
	}
	return p, nil
}

// SetContext sets the context that cancels the producer's blocking waits
// for buffers. Call it before writing.
func (p *ResultPartition) SetContext(ctx context.Context) { p.ctx = ctx }

// ID is the partition's identity on the wire.
func (p *ResultPartition) ID() uuid.UUID { return p.id }

// Name is the partition's name for logs and errors.
func (p *ResultPartition) Name() string { return p.name }

// NumSubpartitions is the number of consumers.
func (p *ResultPartition) NumSubpartitions() int { return len(p.subs) }

// Subpartition returns subpartition i.
func (p *ResultPartition) Subpartition(i int) *Subpartition { return p.subs[i] }

// Stats returns the producer's counters. Call it from the producing
// goroutine or after it finished.
func (p *ResultPartition) Stats() PartitionStats {
	s := p.stats
	for i := range p.builders {
		s.Records += p.builders[i].records
		s.Bytes += int64(p.builders[i].pos)
	}
	return s
}

// DefaultOverdraftBuffers is how many buffers beyond its pool a partition
// takes to finish a record rather than blocking (Flink's
// taskmanager.network.memory.max-overdraft-buffers-per-gate), when its
// pool allows them (buffer.LocalPool.SetOverdraft).
const DefaultOverdraftBuffers = 5

// Available returns nil if the producer can get a buffer now, or a channel
// closed once it may. A task checks it before pulling from a source so it
// waits for output space in its mailbox loop instead of inside a write.
// Producer goroutine only.
func (p *ResultPartition) Available() <-chan struct{} {
	ch := p.pool.Available()
	if ch != nil && p.wakeBatch > 1 {
		// No buffer now: wait for the wake batch (counting what the
		// consumers can take is done only here, not on every call).
		ch = p.pool.AvailableAfter(p.wakeAfter())
	}
	if ch == nil {
		p.overdrawn = false
	}
	return ch
}

// Overdrawn reports whether the producer took an overdraft buffer (its
// pool was empty in the middle of a record) and has not found room since:
// it should wait (Available) before it produces more. Producer goroutine
// only.
func (p *ResultPartition) Overdrawn() bool { return p.overdrawn }

// DefaultWakeBatch is a partition's SetWakeBatch unless set otherwise.
const DefaultWakeBatch = 4

// SetWakeBatch makes a producer that finds its pool empty wait until k
// buffers were recycled (RequestBlockingAfter), not just one: k recycled
// buffers cost one wake-up of the producer instead of k. It waits for at
// most the data buffers queued ahead of any aligned barrier in its
// subpartitions when it starts waiting, counted after the pool's count of
// recycled buffers was taken: consumers take and recycle those without
// its producing anything more, so that the wait always ends. A buffer a
// consumer cannot take before an alignment, or holds until more data
// comes, is never waited for. Call it before writing; k <= 1 restores one
// wake-up per buffer.
func (p *ResultPartition) SetWakeBatch(k int) { p.wakeBatch = k }

// wakeAfter is the pool's count of recycled buffers and how many more the
// producer waits for: the wake batch, at most the buffers its consumers
// can take now, which are counted after since (so each of them is
// recycled after it), at least 1. It takes the pool's and each
// subpartition's lock (once per wait, never per record).
func (p *ResultPartition) wakeAfter() (since uint64, k int) {
	since = p.pool.Recycled()
	if p.wakeBatch <= 1 {
		return since, 1
	}
	q := 0
	for _, s := range p.subs {
		if q += s.consumable(); q >= p.wakeBatch {
			return since, p.wakeBatch
		}
	}
	return since, max(q, 1)
}

func (p *ResultPartition) requestBuffer() (*buffer.Buffer, error) {
	b, err := p.pool.Request()
	if b != nil || err != nil {
		return b, err
	}
	// An overdraft buffer lets the record be finished without blocking:
	// the task then waits for room in its mailbox, where it still takes
	// checkpoints.
	if b, err = p.pool.RequestOverdraft(); b != nil || err != nil {
		p.overdrawn = b != nil
		return b, err
	}
	start := time.Now()
	p.waitStart.Store(monoSince(start))
	since, k := p.wakeAfter()
	b, err = p.pool.RequestBlockingAfter(p.ctx, since, k)
	p.waitStart.Store(0)
	p.stats.BackPressured += time.Since(start)
	p.stats.BackPressureNum++
	if err != nil {
		return nil, fmt.Errorf("network: partition %s: waiting for a buffer: %w", p.name, err)
	}
	return b, nil
}

// Write appends one serialized record to subpartition sub.
func (p *ResultPartition) Write(sub int, rec []byte) error {
	b := &p.builders[sub]
	if start := b.pos; len(b.seg)-start >= lengthSize+len(rec) {
		binary.BigEndian.PutUint32(b.seg[start:], uint32(len(rec)))
		copy(b.seg[start+lengthSize:], rec)
		b.pos = start + lengthSize + len(rec)
		b.records++
		return nil
	}
	return p.writeSpanning(b, rec)
}

// AppendRecord encodes v with appendFn directly into subpartition sub's
// current buffer when it fits, and otherwise serializes it across buffers.
// appendFn must append v's encoding to its argument (append semantics).
func AppendRecord[T any](p *ResultPartition, sub int, appendFn func([]byte, T) []byte, v T) error {
	b := &p.builders[sub]
	if dst, ok := b.dst(); ok && b.commit(appendFn(dst, v)) {
		return nil
	}
	return appendSpanning(p, b, appendFn, v)
}

// appendSpanning encodes v into the partition's scratch slice and writes
// it across buffers: v did not fit in builder b's current buffer.
func appendSpanning[T any](p *ResultPartition, b *builder, appendFn func([]byte, T) []byte, v T) error {
	p.scratch = appendFn(p.scratch[:0], v)
	b.setFit(len(p.scratch))
	return p.writeSpanning(b, p.scratch)
}

// writeEncoded writes rec, a record encoded out of place (it did not fit
// in builder b's current buffer), across buffers. rec may alias the
// segment it is written to: it is copied to the partition's scratch slice
// first.
func (p *ResultPartition) writeEncoded(b *builder, rec []byte) error {
	p.scratch = append(p.scratch[:0], rec...)
	b.setFit(len(p.scratch))
	return p.writeSpanning(b, p.scratch)
}

// writeSpanning writes a record that does not fit in b's current buffer:
// its length prefix and bytes continue in the next buffers.
func (p *ResultPartition) writeSpanning(b *builder, rec []byte) error {
	if len(rec) > 1<<32-1 {
		return fmt.Errorf("network: partition %s: record of %d bytes too large", p.name, len(rec))
	}
	var hdr [lengthSize]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(rec)))
	for _, part := range [2][]byte{hdr[:], rec} {
		for len(part) > 0 {
			if b.room() == 0 {
				if err := p.nextBuffer(b); err != nil {
					return err
				}
			}
			c := copy(b.seg[b.pos:], part)
			b.pos += c
			part = part[c:]
		}
	}
	b.records++
	if b.room() == 0 {
		return p.nextBuffer(b)
	}
	return nil
}

// nextBuffer hands b's current buffer (if it holds data) to its
// subpartition and takes a fresh one from the pool.
func (p *ResultPartition) nextBuffer(b *builder) error {
	p.finishBuffer(b)
	if b.buf != nil {
		return nil // empty buffer kept
	}
	buf, err := p.requestBuffer()
	if err != nil {
		return err
	}
	seg := buf.Segment()
	if n := int(p.subs[b.sub].bufSize.Load()); n > 0 && n < len(seg) {
		seg = seg[:n:n] // debloated: the consumer wants smaller buffers
	}
	b.setSeg(buf, seg, 0)
	p.held = true
	return nil
}

// finishBuffer hands b's buffer to its subpartition if it holds data.
func (p *ResultPartition) finishBuffer(b *builder) {
	if b.buf == nil || b.pos == 0 {
		return
	}
	buf := b.buf
	buf.SetLen(b.pos)
	p.stats.Bytes += int64(b.pos)
	b.setSeg(nil, nil, 0)
	p.stats.Buffers++
	p.subs[b.sub].add(buf)
}

// finishAll hands every builder's data over; it keeps held set while a
// builder keeps an empty buffer.
func (p *ResultPartition) finishAll() {
	held := false
	for i := range p.builders {
		b := &p.builders[i]
		p.finishBuffer(b)
		held = held || b.buf != nil
	}
	p.held = held
}

// Flush hands every partially filled buffer to its subpartition.
func (p *ResultPartition) Flush() {
	if p.held {
		p.finishAll()
	}
}

// FlushSub hands subpartition sub's partially filled buffer over.
func (p *ResultPartition) FlushSub(sub int) { p.finishBuffer(&p.builders[sub]) }

// BroadcastEvent flushes every subpartition and then appends the encoded
// event payload to each as one buffer of type t. Events need no credit.
func (p *ResultPartition) BroadcastEvent(payload []byte, t buffer.DataType) {
	p.finishAll()
	ev := buffer.Wrap(payload, t)
	for i := 1; i < len(p.subs); i++ {
		ev.Retain()
	}
	for _, s := range p.subs {
		s.add(ev)
	}
}

// Finish flushes, appends the end-of-partition event to every
// subpartition and returns the producer's unused buffers. The partition
// accepts no more writes.
func (p *ResultPartition) Finish(endOfPartition []byte) {
	if p.finished {
		return
	}
	p.BroadcastEvent(endOfPartition, buffer.Event)
	p.finished = true
	p.releaseBuilders()
}

func (p *ResultPartition) releaseBuilders() {
	for i := range p.builders {
		b := &p.builders[i]
		if b.buf != nil {
			p.stats.Bytes += int64(b.pos) // written, though never sent
			b.buf.Release()
			b.setSeg(nil, nil, 0)
		}
	}
	p.held = false
}

// Release drops everything queued (a failed or cancelled producer or
// consumer) and closes the pool; buffers still held by readers return to
// the global pool when released. Call it from the producing goroutine
// after it stopped writing.
func (p *ResultPartition) Release() {
	p.releaseBuilders()
	for _, s := range p.subs {
		s.Release()
	}
	p.pool.Close()
}

// Subpartition is the FIFO of buffers for one consumer. It counts its
// backlog (data buffers queued) and, after handing out an aligned
// checkpoint barrier, hands out nothing more until Resume: that is how an
// aligned channel stops being consumed without buffering anywhere.
type Subpartition struct {
	index  int
	parent *ResultPartition
	reader atomic.Bool
	// bufSize is the size the consumer wants its buffers cut at (buffer
	// debloating); 0 means the whole segment.
	bufSize atomic.Int32

	mu struct {
		sync.Mutex
		queue    []*buffer.Buffer
		head     int
		backlog  int // data buffers in queue
		blocked  bool
		released bool
		listener Listener
		// hold, when holding, is the queue index where a barrier stood
		// that a local reader let overtake (PrioritizeBarrier): the items
		// from there on wait for Resume, as they would behind a polled
		// aligned barrier.
		hold    int
		holding bool
		priorityState
	}
}

// Index is the subpartition's position in its partition.
func (s *Subpartition) Index() int { return s.index }

// Partition is the subpartition's partition.
func (s *Subpartition) Partition() *ResultPartition { return s.parent }

// Attach registers the single reader of s. It fails if s already has one.
func (s *Subpartition) Attach(l Listener) error {
	if !s.reader.CompareAndSwap(false, true) {
		return fmt.Errorf("network: partition %s subpartition %d already has a reader", s.parent.name, s.index)
	}
	s.mu.Lock()
	s.mu.listener = l
	notify := s.availableLocked()
	s.mu.Unlock()
	if notify {
		l.NotifyDataAvailable()
	}
	return nil
}

func (s *Subpartition) availableLocked() bool {
	return !s.mu.blocked && s.mu.head < len(s.mu.queue) && (!s.mu.holding || s.mu.head < s.mu.hold)
}

func (s *Subpartition) add(b *buffer.Buffer) {
	s.mu.Lock()
	if s.mu.released {
		s.mu.Unlock()
		b.Release()
		return
	}
	wasEmpty := !s.availableLocked()
	if s.mu.head > 0 && s.mu.head == len(s.mu.queue) {
		if s.mu.holding {
			s.mu.hold -= s.mu.head
		}
		s.mu.queue = s.mu.queue[:0]
		s.mu.head = 0
	}
	s.mu.queue = append(s.mu.queue, b)
	l := s.mu.listener
	priority := false
	if b.IsData() {
		s.mu.backlog++
	} else {
		// An announcement may fall due: the local reader takes it first.
		priority = s.addedEventLocked(b)
	}
	notify := wasEmpty && s.availableLocked()
	s.mu.Unlock()
	if l == nil {
		return
	}
	if priority {
		l.NotifyPriority()
	}
	if notify {
		l.NotifyDataAvailable()
	}
}

// Polled is what Poll hands out.
type Polled struct {
	Buffer   *buffer.Buffer
	Backlog  int             // data buffers still queued after this one
	More     bool            // another buffer can be polled right away
	NextType buffer.DataType // type of the next buffer when More
}

// Poll takes the next buffer, or returns a nil Buffer when there is none or
// s is blocked. After a buffer whose type blocks upstream, s is blocked.
func (s *Subpartition) Poll() Polled {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.availableLocked() {
		return Polled{Backlog: s.mu.backlog}
	}
	if s.mu.inBand > 0 && !s.mu.annChecked {
		if a := s.announcementLocked(); a != nil {
			return Polled{Buffer: a, Backlog: s.mu.backlog, More: true, NextType: s.mu.queue[s.mu.head].Type()}
		}
	}
	b := s.mu.queue[s.mu.head]
	s.mu.queue[s.mu.head] = nil
	s.mu.head++
	if b.IsData() {
		s.mu.backlog--
	} else {
		s.polledEventLocked(b)
	}
	if b.Type().BlocksUpstream() {
		s.mu.blocked = true
	}
	r := Polled{Buffer: b, Backlog: s.mu.backlog, More: s.availableLocked()}
	if r.More {
		r.NextType = s.mu.queue[s.mu.head].Type()
	}
	return r
}

// consumable counts the data buffers a reader can take from s without the
// producer writing more: those queued ahead of the first aligned barrier
// (after which s blocks until Resume) and of a held part.
func (s *Subpartition) consumable() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.blocked || s.mu.released {
		return 0
	}
	end := len(s.mu.queue)
	if s.mu.holding {
		end = min(end, s.mu.hold)
	}
	n := 0
	for _, b := range s.mu.queue[min(s.mu.head, end):end] {
		if b.Type().BlocksUpstream() {
			break
		}
		if b.IsData() {
			n++
		}
	}
	return n
}

// Peek reports the type of the next buffer, if one can be polled now, and
// the backlog.
func (s *Subpartition) Peek() (t buffer.DataType, ok bool, backlog int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.availableLocked() {
		return 0, false, s.mu.backlog
	}
	return s.mu.queue[s.mu.head].Type(), true, s.mu.backlog
}

// SetBufferSize asks the producer to cut the buffers of s at n bytes from
// its next buffer on (buffer debloating: NEW_BUFFER_SIZE, or a local
// consumer's own decision). n is clamped to [MinBufferSize, the segment
// size]; 0 restores whole segments. Safe from any goroutine.
func (s *Subpartition) SetBufferSize(n int) {
	if n > 0 && n < MinBufferSize {
		n = MinBufferSize
	}
	if n > 1<<30 {
		n = 0
	}
	s.bufSize.Store(int32(n))
}

// BufferSize is the buffer size set by SetBufferSize (0: whole segments).
func (s *Subpartition) BufferSize() int { return int(s.bufSize.Load()) }

// MinBufferSize is the smallest buffer size SetBufferSize applies.
const MinBufferSize = 256

// Backlog is the number of data buffers queued.
func (s *Subpartition) Backlog() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.backlog
}

// Resume lets a subpartition blocked by an aligned barrier hand out buffers
// again. Resuming an unblocked subpartition does nothing.
func (s *Subpartition) Resume() {
	s.mu.Lock()
	if !s.mu.blocked && !s.mu.holding {
		s.mu.Unlock()
		return
	}
	s.mu.blocked, s.mu.holding = false, false
	s.mu.annChecked = false
	var l Listener
	if s.availableLocked() {
		l = s.mu.listener
	}
	s.mu.Unlock()
	if l != nil {
		l.NotifyDataAvailable()
	}
}

// Release drops every queued buffer; later adds are released at once. It
// is idempotent and safe from any goroutine.
func (s *Subpartition) Release() {
	s.mu.Lock()
	if s.mu.released {
		s.mu.Unlock()
		return
	}
	s.mu.released = true
	q := s.mu.queue[s.mu.head:]
	s.mu.queue, s.mu.head, s.mu.backlog = nil, 0, 0
	s.mu.holding, s.mu.inBand = false, 0
	s.mu.listener = nil
	s.mu.Unlock()
	for _, b := range q {
		b.Release()
	}
}

// ReleaseProducer is called by a producer that finished normally: it
// returns the producer's unused buffers and closes the pool, while buffers
// still queued stay readable and return to the global pool once consumed.
func (p *ResultPartition) ReleaseProducer() {
	p.releaseBuilders()
	p.pool.Close()
}
