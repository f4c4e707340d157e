package network

import (
	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/network/wire"
)

// unaligned is a RemoteChannel's part in unaligned checkpoints, guarded
// by its mu: the priority items that overtake its queue, the recording of
// its in-flight data, and where the last barrier arrived.
//
// Every item appended to the queue gets an arrival number (arrived counts
// them, polled counts those taken), so a barrier's place in the stream
// survives the consumer taking items meanwhile: the items ahead of a
// barrier that arrived when arrived was at are those numbered below at.
type unaligned struct {
	prio []*buffer.Buffer // priority events and announcements, FIFO

	rec   Recorder // records arrivals until barrier recID, when not nil
	recID barrier.CheckpointID

	// bars are the latest barriers received (in band or priority), in
	// arrival order, with the arrival number they came at.
	bars            []barrierAt
	arrived, polled uint64
}

type barrierAt struct {
	id barrier.CheckpointID
	at uint64
}

// maxBarriersKept bounds unaligned.bars: barriers of checkpoints that many
// behind are of no more use.
const maxBarriersKept = 8

// barrierPos returns where barrier id arrived: its arrival number, or if
// only newer barriers arrived, the earliest of theirs (a newer barrier
// overtook id's at the producer, so nothing comes between them); ok is
// false if neither arrived.
func (u *unaligned) barrierPos(id barrier.CheckpointID) (at uint64, ok bool) {
	for _, b := range u.bars {
		switch {
		case b.id == id:
			return b.at, true
		case b.id > id && (!ok || b.at < at):
			at, ok = b.at, true
		}
	}
	return at, ok
}

// pushLocked queues b, recording it and noting barriers; it reports
// whether a priority item was queued.
func (ch *RemoteChannel) pushLocked(b *buffer.Buffer) bool {
	id, isBarrier := BarrierID(b)
	switch {
	case isBarrier:
		if len(ch.mu.bars) == maxBarriersKept {
			copy(ch.mu.bars, ch.mu.bars[1:])
			ch.mu.bars = ch.mu.bars[:maxBarriersKept-1]
		}
		ch.mu.bars = append(ch.mu.bars, barrierAt{id: id, at: ch.mu.arrived})
		if ch.mu.rec != nil && id >= ch.mu.recID {
			ch.mu.rec = nil
		}
	case ch.mu.rec != nil:
		ch.mu.rec.Record(b)
	}
	if b.Type() == buffer.PriorityEvent {
		ch.mu.prio = append(ch.mu.prio, b)
		return true
	}
	ch.appendLocked(b)
	if isBarrier && b.Type() == buffer.TimeoutableAlignedBarrier {
		// The server sends nothing after an aligned barrier until it is
		// resumed, so no other barrier is queued ahead of this one: it is
		// announced at once.
		ch.mu.prio = append(ch.mu.prio, announcement(uint32(ch.mu.arrived-1), b.Bytes()))
		return true
	}
	return false
}

func (ch *RemoteChannel) popPriorityLocked() *buffer.Buffer {
	b := ch.mu.prio[0]
	copy(ch.mu.prio, ch.mu.prio[1:])
	ch.mu.prio[len(ch.mu.prio)-1] = nil
	ch.mu.prio = ch.mu.prio[:len(ch.mu.prio)-1]
	return b
}

// Persist starts recording the channel's in-flight data into the channel
// state of unaligned checkpoint id (barrier.UnalignedController's
// PersistChannel): if barrier id has arrived, the buffers queued ahead of
// it; otherwise every buffer queued now and then every buffer arriving,
// until barrier id arrives, StopPersisting, or the channel ends. Safe
// from any goroutine.
func (ch *RemoteChannel) Persist(id barrier.CheckpointID, rec Recorder) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.mu.released || ch.mu.err != nil || ch.mu.ended && ch.mu.head == len(ch.mu.queue) {
		return
	}
	if at, ok := ch.mu.barrierPos(id); ok {
		if at > ch.mu.polled {
			n := int(at - ch.mu.polled)
			for _, b := range ch.mu.queue[ch.mu.head : ch.mu.head+n] {
				rec.Record(b)
			}
		}
		return
	}
	for _, b := range ch.mu.queue[ch.mu.head:] {
		rec.Record(b)
	}
	if !ch.mu.ended {
		ch.mu.rec, ch.mu.recID = rec, id
	}
}

// StopPersisting stops recording for checkpoint id (complete or
// aborted).
func (ch *RemoteChannel) StopPersisting(id barrier.CheckpointID) {
	ch.mu.Lock()
	if ch.mu.rec != nil && ch.mu.recID <= id {
		ch.mu.rec = nil
	}
	ch.mu.Unlock()
}

// PrioritizeBarrier lets the announced barrier id overtake the buffers
// queued ahead of it (barrier.UnalignedController's PrioritizeBarrier):
// it leaves the queue, the buffers ahead of it stay, and the channel is
// blocked as if the barrier had been taken (the server sent nothing
// after it; Resume sends RESUME_CONSUMPTION).
func (ch *RemoteChannel) PrioritizeBarrier(id barrier.CheckpointID) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for k := ch.mu.head; k < len(ch.mu.queue); k++ {
		b := ch.mu.queue[k]
		if got, ok := BarrierID(b); !ok || got != id {
			continue
		}
		copy(ch.mu.queue[k:], ch.mu.queue[k+1:])
		ch.mu.queue[len(ch.mu.queue)-1] = nil
		ch.mu.queue = ch.mu.queue[:len(ch.mu.queue)-1]
		ch.mu.arrived--
		if b.Type().BlocksUpstream() {
			ch.mu.blocked = true
		}
		b.Release()
		return
	}
}

// SetBufferSize asks the server to cut this channel's buffers at n bytes
// (NEW_BUFFER_SIZE; buffer debloating). Safe from any goroutine.
func (ch *RemoteChannel) SetBufferSize(n int) {
	ch.mu.Lock()
	c := ch.mu.conn
	active := !ch.mu.released && ch.mu.err == nil && !ch.mu.ended && ch.mu.started
	ch.mu.Unlock()
	if c != nil && active && n > 0 {
		c.newBufferSize(ch, uint32(n))
	}
}

// Queued is the number of buffers waiting in the channel.
func (ch *RemoteChannel) Queued() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return len(ch.mu.queue) - ch.mu.head
}

// newBufferSize queues NEW_BUFFER_SIZE for ch.
func (c *clientConn) newBufferSize(ch *RemoteChannel, n uint32) {
	c.mu.Lock()
	if c.mu.channels[ch.receiver] == ch && !c.mu.closing {
		c.mu.ctrl = wire.AppendNewBufferSize(c.mu.ctrl, wire.NewBufferSize{Receiver: ch.receiver, Size: n})
	}
	c.mu.Unlock()
	c.signal()
}
