package network

import (
	"encoding/binary"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/network/wire"
)

// This file holds what unaligned checkpoints need from a subpartition:
// priority events that overtake the queue, the recording of what they
// overtake, announcements of queued barriers for a local reader, and the
// overtaking of an announced barrier (docs/protocol.md "Data types";
// barrier/doc.go "Recording channel state").

// Recorder receives the in-flight buffers that become a checkpoint's
// channel state, in stream order: data buffers and events. It is called
// with locks of the network held, with a buffer the caller still owns:
// it copies what it keeps, and it neither blocks nor calls back into the
// network.
type Recorder interface {
	Record(b *buffer.Buffer)
}

// priorityState is a subpartition's bookkeeping of in-band checkpoint
// barriers (aligned and timeoutable aligned), guarded by its mu.
type priorityState struct {
	// inBand counts the in-band barriers queued.
	inBand int
	// announce: the reader is local and wants announcements of queued
	// timeoutable barriers (a remote reader's client makes its own).
	announce bool
	// annChecked: the first queued in-band barrier was looked at since
	// the queue last changed in a way that matters; annID is the newest
	// barrier announced.
	annChecked bool
	annID      barrier.CheckpointID
	// claimed is the in-band barrier whose overtaken data a local reader
	// recorded itself: the producer no longer turns it into a priority
	// barrier.
	claimed barrier.CheckpointID
}

// barrierWatch waits for one barrier to leave every subpartition.
type barrierWatch struct {
	id      barrier.CheckpointID
	counted []bool
	left    int
	done    func()
}

// WatchBarrier arranges for done to be called once the in-band barrier id
// (about to be broadcast) has left the producer's hands in every
// subpartition: its reader took it, a local reader claimed it, or
// ConvertBarrier converted it. done is called from whichever goroutine
// did the last of these, possibly with network locks held: it must not
// block or call back into the network. Call it from the producer's
// goroutine before the barrier is broadcast.
func (p *ResultPartition) WatchBarrier(id barrier.CheckpointID, done func()) {
	p.watching.Store(true)
	p.watch.mu.Lock()
	p.watch.list = append(p.watch.list, &barrierWatch{id: id, counted: make([]bool, len(p.subs)), done: done})
	p.watch.mu.Unlock()
}

// barrierLeft counts barrier id as gone from subpartition sub (each
// subpartition counts once per barrier: a claimed barrier is taken later).
// Only id itself counts: a newer barrier turned into a priority event
// overtakes an older one that is still queued.
func (p *ResultPartition) barrierLeft(sub int, id barrier.CheckpointID) {
	var done []func()
	p.watch.mu.Lock()
	keep := p.watch.list[:0]
	for _, w := range p.watch.list {
		if w.id == id && !w.counted[sub] {
			w.counted[sub] = true
			w.left++
		}
		if w.left == len(w.counted) {
			done = append(done, w.done)
			continue
		}
		keep = append(keep, w)
	}
	clear(p.watch.list[len(keep):])
	p.watch.list = keep
	p.watch.mu.Unlock()
	for _, f := range done {
		f()
	}
}

// barrierLeftLocked reports that in-band barrier id left s.
func (s *Subpartition) barrierLeftLocked(id barrier.CheckpointID) {
	if s.parent.watching.Load() {
		s.parent.barrierLeft(s.index, id)
	}
}

// BarrierID returns the checkpoint ID of b if b is a checkpoint barrier
// event (of any data type but data).
func BarrierID(b *buffer.Buffer) (barrier.CheckpointID, bool) {
	if b.IsData() || b.Len() < 9 {
		return 0, false
	}
	p := b.Bytes()
	if wire.EventKind(p[0]) != wire.EventBarrier {
		return 0, false
	}
	return barrier.CheckpointID(binary.BigEndian.Uint64(p[1:9])), true
}

func isInBandBarrier(b *buffer.Buffer) bool {
	t := b.Type()
	if t != buffer.AlignedBarrier && t != buffer.TimeoutableAlignedBarrier {
		return false
	}
	_, ok := BarrierID(b)
	return ok
}

// addedEventLocked accounts for event b just queued and reports whether
// an announcement is due for the local reader.
func (s *Subpartition) addedEventLocked(b *buffer.Buffer) bool {
	if !isInBandBarrier(b) {
		return false
	}
	s.mu.inBand++
	s.mu.annChecked = false
	return s.mu.announce && b.Type() == buffer.TimeoutableAlignedBarrier && s.availableLocked()
}

// polledEventLocked accounts for event b just taken from the queue.
func (s *Subpartition) polledEventLocked(b *buffer.Buffer) {
	if isInBandBarrier(b) {
		s.mu.inBand--
		s.mu.annChecked = false
		id, _ := BarrierID(b)
		s.barrierLeftLocked(id)
	}
}

// announcementLocked returns the announcement of the first in-band
// barrier queued (before any hold) if it is a timeoutable barrier not yet
// announced, for a local reader; nil otherwise.
func (s *Subpartition) announcementLocked() *buffer.Buffer {
	s.mu.annChecked = true
	if !s.mu.announce {
		return nil
	}
	end := len(s.mu.queue)
	if s.mu.holding {
		end = s.mu.hold
	}
	for k := s.mu.head; k < end; k++ {
		b := s.mu.queue[k]
		if !isInBandBarrier(b) {
			continue
		}
		id, _ := BarrierID(b)
		if b.Type() != buffer.TimeoutableAlignedBarrier || id <= s.mu.annID {
			return nil
		}
		s.mu.annID = id
		return announcement(uint32(k-s.mu.head), b.Bytes())
	}
	return nil
}

// announcement returns a priority buffer announcing the event payload ev
// under sequence number seq (event kind 6).
func announcement(seq uint32, ev []byte) *buffer.Buffer {
	p := make([]byte, 0, 5+len(ev))
	p = append(p, byte(wire.EventAnnouncement))
	p = binary.BigEndian.AppendUint32(p, seq)
	p = append(p, ev...)
	return buffer.Wrap(p, buffer.PriorityEvent)
}

// findBarrierLocked returns the queue index of barrier id, or -1.
func (s *Subpartition) findBarrierLocked(id barrier.CheckpointID) int {
	for k := s.mu.head; k < len(s.mu.queue); k++ {
		if got, ok := BarrierID(s.mu.queue[k]); ok && got == id {
			return k
		}
	}
	return -1
}

// recordLocked hands the items in queue[from:to] to rec.
func (s *Subpartition) recordLocked(rec Recorder, from, to int) {
	for _, b := range s.mu.queue[from:to] {
		rec.Record(b)
	}
}

// removeLocked takes queue[k] out of the queue (the queue order of the
// others stays) and returns it.
func (s *Subpartition) removeLocked(k int) *buffer.Buffer {
	b := s.mu.queue[k]
	copy(s.mu.queue[k:], s.mu.queue[k+1:])
	s.mu.queue[len(s.mu.queue)-1] = nil
	s.mu.queue = s.mu.queue[:len(s.mu.queue)-1]
	if s.mu.holding && s.mu.hold > k {
		s.mu.hold--
	}
	return b
}

// insertHeadLocked puts b ahead of everything queued.
func (s *Subpartition) insertHeadLocked(b *buffer.Buffer) {
	if s.mu.head > 0 {
		s.mu.head--
		s.mu.queue[s.mu.head] = b
		return
	}
	s.mu.queue = append(s.mu.queue, nil)
	copy(s.mu.queue[1:], s.mu.queue)
	s.mu.queue[0] = b
	if s.mu.holding {
		s.mu.hold++
	}
}

// addPriority queues priority event ev ahead of every buffer queued in s
// (an unaligned checkpoint barrier) and hands the buffers it overtakes to
// rec, if not nil: they are in flight, produced before ev, and reach the
// consumer after it. The reader is told at once, even if s is not empty.
func (s *Subpartition) addPriority(ev *buffer.Buffer, rec Recorder) {
	s.mu.Lock()
	if s.mu.released {
		s.mu.Unlock()
		ev.Release()
		return
	}
	if rec != nil {
		s.recordLocked(rec, s.mu.head, len(s.mu.queue))
	}
	s.insertHeadLocked(ev)
	l := s.mu.listener
	notify := s.availableLocked()
	s.mu.Unlock()
	if l != nil && notify {
		l.NotifyPriority()
	}
}

// convertBarrier turns in-band barrier id, if it still waits in s and no
// local reader took it over, into the priority event ev (the producer's
// alignment timeout): ev goes ahead of everything queued and rec gets the
// buffers queued ahead of the barrier. It reports whether it did; ev is
// released if not.
func (s *Subpartition) convertBarrier(id barrier.CheckpointID, ev *buffer.Buffer, rec Recorder) bool {
	s.mu.Lock()
	k := -1
	if !s.mu.released && s.mu.claimed != id {
		k = s.findBarrierLocked(id)
	}
	if k < 0 || !isInBandBarrier(s.mu.queue[k]) {
		s.mu.Unlock()
		ev.Release()
		return false
	}
	if rec != nil {
		s.recordLocked(rec, s.mu.head, k)
	}
	old := s.removeLocked(k)
	s.mu.inBand--
	s.mu.annChecked = false
	s.barrierLeftLocked(id)
	s.insertHeadLocked(ev)
	l := s.mu.listener
	notify := s.availableLocked()
	s.mu.Unlock()
	old.Release()
	if l != nil && notify {
		l.NotifyPriority()
	}
	return true
}

// persistAhead is a local reader's PersistChannel for checkpoint id: if
// barrier id waits in the queue, the buffers ahead of it go to rec, the
// barrier is claimed (the producer will not convert it), and persistAhead
// returns true. Otherwise it records nothing and returns false.
func (s *Subpartition) persistAhead(id barrier.CheckpointID, rec Recorder) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.findBarrierLocked(id)
	if k < 0 {
		return false
	}
	s.recordLocked(rec, s.mu.head, k)
	s.mu.claimed = id
	s.barrierLeftLocked(id)
	return true
}

// prioritizeBarrier takes the announced barrier id out of the queue for a
// local reader: the buffers ahead of it stay available, those behind it
// are held until Resume. If rec is not nil the buffers ahead of it go to
// rec first. It reports whether barrier id was queued.
func (s *Subpartition) prioritizeBarrier(id barrier.CheckpointID, rec Recorder) bool {
	s.mu.Lock()
	k := s.findBarrierLocked(id)
	if k < 0 {
		s.mu.Unlock()
		return false
	}
	if rec != nil {
		s.recordLocked(rec, s.mu.head, k)
	}
	b := s.removeLocked(k)
	if isInBandBarrier(b) {
		s.mu.inBand--
	}
	s.mu.annChecked = false
	s.mu.claimed = id
	s.barrierLeftLocked(id)
	if !s.mu.holding {
		s.mu.hold, s.mu.holding = k, true
	}
	s.mu.Unlock()
	b.Release()
	return true
}

// pollPriority takes the head of the queue if it is a priority item (a
// priority event, or an announcement due for a local reader), and
// nothing otherwise.
func (s *Subpartition) pollPriority() *buffer.Buffer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.availableLocked() {
		return nil
	}
	if s.mu.inBand > 0 && !s.mu.annChecked {
		if a := s.announcementLocked(); a != nil {
			return a
		}
	}
	b := s.mu.queue[s.mu.head]
	if b.Type() != buffer.PriorityEvent {
		return nil
	}
	s.mu.queue[s.mu.head] = nil
	s.mu.head++
	return b
}

// SetAlignedBarriers makes the partition's checkpoint barriers travel in
// band even when its checkpoints are unaligned (the task asks with
// AlignedBarriers): Flink keeps the barriers of pointwise and broadcast
// exchanges aligned unless unaligned checkpoints are forced. Call it
// before the partition is written.
func (p *ResultPartition) SetAlignedBarriers(on bool) { p.alignedOnly = on }

// AlignedBarriers reports SetAlignedBarriers.
func (p *ResultPartition) AlignedBarriers() bool { return p.alignedOnly }

// BroadcastPriorityEvent flushes every subpartition and queues the event
// payload in each as a priority event ahead of everything queued there
// (an unaligned checkpoint barrier). recFor, if not nil, returns the
// recorder of each subpartition's overtaken buffers (the output side of
// the channel state).
func (p *ResultPartition) BroadcastPriorityEvent(payload []byte, recFor func(sub int) Recorder) {
	p.finishAll()
	ev := buffer.Wrap(payload, buffer.PriorityEvent)
	for i := 1; i < len(p.subs); i++ {
		ev.Retain()
	}
	for i, s := range p.subs {
		var rec Recorder
		if recFor != nil {
			rec = recFor(i)
		}
		s.addPriority(ev, rec)
	}
}

// ConvertBarrier turns the in-band barrier id still queued in any
// subpartition into the priority event payload (the producer's alignment
// timed out: Flink's output-side aligned-checkpoint timeout). recFor
// returns the recorder of each subpartition's overtaken buffers. A
// subpartition whose reader already took the barrier, or claimed it,
// keeps it. It returns the subpartitions converted.
func (p *ResultPartition) ConvertBarrier(id barrier.CheckpointID, payload []byte, recFor func(sub int) Recorder) []int {
	var done []int
	for i, s := range p.subs {
		var rec Recorder
		if recFor != nil {
			rec = recFor(i)
		}
		if s.convertBarrier(id, buffer.Wrap(payload, buffer.PriorityEvent), rec) {
			done = append(done, i)
		}
	}
	return done
}

// RestoreInFlight queues, in subpartition sub, an item of the channel
// state the producer recorded at an unaligned checkpoint: data bytes
// (records, cut anywhere) go into data buffers as they are, an event
// payload into an event buffer. Restored items come before anything the
// producer writes: call it from the producer's goroutine before it
// writes. It blocks while the pool is empty.
func (p *ResultPartition) RestoreInFlight(sub int, event bool, payload []byte) error {
	if event {
		p.subs[sub].add(buffer.Wrap(append([]byte(nil), payload...), buffer.Event))
		return nil
	}
	for len(payload) > 0 {
		b, err := p.requestBuffer()
		if err != nil {
			return err
		}
		n := copy(b.Segment(), payload)
		b.SetLen(n)
		payload = payload[n:]
		p.stats.Buffers++
		p.subs[sub].add(b)
	}
	return nil
}
