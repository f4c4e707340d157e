package network

import (
	"encoding/binary"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/network/wire"
)

// testRecorder keeps copies of what it records.
type testRecorder struct {
	mu    sync.Mutex
	items []recorded
}

type recorded struct {
	typ   buffer.DataType
	bytes []byte
}

func (r *testRecorder) Record(b *buffer.Buffer) {
	r.mu.Lock()
	r.items = append(r.items, recorded{typ: b.Type(), bytes: append([]byte(nil), b.Bytes()...)})
	r.mu.Unlock()
}

// data returns the bytes of the recorded data buffers, concatenated.
func (r *testRecorder) data() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []byte
	for _, it := range r.items {
		if it.typ == buffer.Data {
			out = append(out, it.bytes...)
		}
	}
	return out
}

// seqRecord is record i of a test stream: its length varies from 4 to
// 603 bytes, so that with 256-byte segments most records span buffers.
func seqRecord(i int) []byte {
	rec := make([]byte, 4+(i*37)%600)
	binary.BigEndian.PutUint32(rec, uint32(i))
	return rec
}

// seqReader checks that records arrive as seqRecord(0), seqRecord(1), …
type seqReader struct {
	t    testing.TB
	d    *Deserializer
	next int
}

func newSeqReader(t testing.TB) *seqReader {
	return &seqReader{t: t, d: NewDeserializer("test", 0)}
}

// feed deserializes data buffer b (taking it over) and checks its records.
func (r *seqReader) feed(b *buffer.Buffer) {
	r.t.Helper()
	r.d.SetBuffer(b)
	for {
		rec, ok, err := r.d.Next()
		require.NoError(r.t, err)
		if !ok {
			return
		}
		require.Equal(r.t, seqRecord(r.next), rec, "record %d", r.next)
		r.next++
	}
}

// feedBytes is feed for bytes not in a buffer.
func (r *seqReader) feedBytes(p []byte) {
	r.t.Helper()
	if len(p) > 0 {
		r.feed(buffer.Wrap(append([]byte(nil), p...), buffer.Data))
	}
}

func writeSeq(t testing.TB, p *ResultPartition, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		require.NoError(t, p.Write(0, seqRecord(i)))
	}
}

func barrierOf(t testing.TB, b *buffer.Buffer) barrier.CheckpointID {
	t.Helper()
	id, ok := BarrierID(b)
	require.True(t, ok, "not a barrier: %s %x", b.Type(), b.Bytes())
	return id
}

func unalignedPayload(id uint64) []byte {
	return wire.AppendEvent(nil, wire.Event{Kind: wire.EventBarrier, Barrier: barrier.Barrier{ID: barrier.CheckpointID(id), Timestamp: 1,
		Options: barrier.Options{Alignment: barrier.Unaligned}}})
}

func timeoutablePayload(id uint64) []byte {
	return wire.AppendEvent(nil, wire.Event{Kind: wire.EventBarrier, Barrier: barrier.Barrier{ID: barrier.CheckpointID(id), Timestamp: 1,
		Options: barrier.Options{Alignment: barrier.AlignedWithTimeout}}})
}

// An unaligned barrier overtakes every buffer queued in the producer's
// subpartition; the producer records exactly those, and together with the
// partial record the consumer holds they are whole records, in order.
func TestPriorityBarrierOvertakesSubpartition(t *testing.T) {
	g, p := newTestPartition(t, 1)
	ch := NewLocalChannel("local", p.Subpartition(0))
	gate := NewInputGate("g", []InputChannel{ch})
	require.NoError(t, gate.Start())
	writeSeq(t, p, 0, 40)
	r := newSeqReader(t)
	for range 5 {
		_, b, err := pollOne(t, gate)
		require.NoError(t, err)
		r.feed(b)
	}
	partial := r.d.AppendUnconsumed(nil) // what the consumer's channel state starts with
	p.Flush()
	queued := p.Subpartition(0).Backlog()
	require.Positive(t, queued)

	out := &testRecorder{}
	p.BroadcastPriorityEvent(unalignedPayload(1), func(int) Recorder { return out })
	writeSeq(t, p, 40, 60) // after the barrier: not in flight for checkpoint 1
	p.Finish(eop)

	_, b, err := pollOne(t, gate)
	require.NoError(t, err)
	require.Equal(t, buffer.PriorityEvent, b.Type())
	require.EqualValues(t, 1, barrierOf(t, b))
	b.Release()
	ch.Persist(1, &testRecorder{}) // the barrier was taken: nothing to record here

	// The channel state is the partial record and the overtaken buffers:
	// replayed into a fresh reader that resumes at the partial record's
	// record number, they are whole records up to the barrier.
	replay := newSeqReader(t)
	replay.next = r.next
	replay.feedBytes(partial)
	replay.feedBytes(out.data())
	require.False(t, replay.d.Pending(), "the producer flushed at a record boundary")
	require.Len(t, out.items, queued)

	// The consumer still gets everything, in order, after the barrier.
	for {
		_, b, err := pollOne(t, gate)
		require.NoError(t, err)
		if !b.IsData() {
			require.Equal(t, eop, b.Bytes())
			b.Release()
			break
		}
		r.feed(b)
	}
	require.Equal(t, 60, r.next)
	r.d.Close()
	replay.d.Close()
	gate.Close()
	p.ReleaseProducer()
	require.Zero(t, g.InUse())
}

// A timeoutable barrier in a local subpartition is announced to the
// consumer before anything else; persisting it records the buffers ahead
// of it and claims it (the producer no longer converts it); overtaking it
// holds what follows until Resume.
func TestLocalAnnouncementAndOvertake(t *testing.T) {
	g, p := newTestPartition(t, 1)
	ch := NewLocalChannel("local", p.Subpartition(0))
	gate := NewInputGate("g", []InputChannel{ch})
	require.NoError(t, gate.Start())
	writeSeq(t, p, 0, 10)
	p.BroadcastEvent(timeoutablePayload(3), buffer.TimeoutableAlignedBarrier)
	writeSeq(t, p, 10, 20)
	p.Flush()

	_, b, err := pollOne(t, gate)
	require.NoError(t, err)
	ev, err := wire.DecodeEvent(b.Bytes())
	require.NoError(t, err)
	require.Equal(t, wire.EventAnnouncement, ev.Kind)
	require.EqualValues(t, 3, ev.Announced.Barrier.ID)
	require.Equal(t, buffer.PriorityEvent, b.Type())
	b.Release()

	in := &testRecorder{}
	ch.Persist(3, in)
	require.Empty(t, p.ConvertBarrier(3, unalignedPayload(3), nil), "claimed by the consumer")
	ch.PrioritizeBarrier(3)

	r := newSeqReader(t)
	var got []byte
	for {
		_, b, err := gate.PollNext()
		require.NoError(t, err)
		if b == nil {
			break
		}
		got = append(got, b.Bytes()...)
		r.feed(b)
	}
	require.Equal(t, 10, r.next, "the records behind the barrier are held")
	require.Equal(t, got, in.data(), "the buffers ahead of the barrier are the channel state")

	gate.Resume(0)
	for r.next < 20 {
		_, b, err := pollOne(t, gate)
		require.NoError(t, err)
		r.feed(b)
	}
	p.Finish(eop)
	_, b, err = pollOne(t, gate)
	require.NoError(t, err)
	require.Equal(t, eop, b.Bytes())
	b.Release()
	r.d.Close()
	gate.Close()
	p.ReleaseProducer()
	require.Zero(t, g.InUse())
}

// The producer's alignment timeout turns a queued timeoutable barrier
// into a priority barrier and records what it overtakes; a consumer
// persisting after that records nothing.
func TestConvertBarrier(t *testing.T) {
	g, p := newTestPartition(t, 2)
	// Subpartition 1 has no reader; subpartition 0 a local one.
	ch := NewLocalChannel("local", p.Subpartition(0))
	gate := NewInputGate("g", []InputChannel{ch})
	require.NoError(t, gate.Start())
	writeSeq(t, p, 0, 10)
	p.BroadcastEvent(timeoutablePayload(4), buffer.TimeoutableAlignedBarrier)
	writeSeq(t, p, 10, 12)
	p.Flush()

	recs := []*testRecorder{{}, {}}
	done := p.ConvertBarrier(4, unalignedPayload(4), func(s int) Recorder { return recs[s] })
	require.Equal(t, []int{0, 1}, done)
	require.Empty(t, recs[1].items, "nothing queued ahead of the barrier on subpartition 1")
	require.Empty(t, p.ConvertBarrier(4, unalignedPayload(4), nil), "converted once")

	// The announcement that was due is gone with the in-band barrier.
	_, b, err := pollOne(t, gate)
	require.NoError(t, err)
	require.Equal(t, buffer.PriorityEvent, b.Type())
	require.EqualValues(t, 4, barrierOf(t, b))
	b.Release()
	in := &testRecorder{}
	ch.Persist(4, in)
	require.Empty(t, in.items)

	r := newSeqReader(t)
	var got []byte
	for r.next < 12 {
		_, b, err := pollOne(t, gate)
		require.NoError(t, err)
		if r.next < 10 {
			got = append(got, b.Bytes()...)
		}
		r.feed(b)
	}
	require.Equal(t, recs[0].data(), got[:len(recs[0].data())])
	r.d.Close()
	gate.Close()
	p.Release()
	require.Zero(t, g.InUse())
}

// Recording by a local channel whose barrier has not come yet: the
// buffers it hands out until the barrier, and not the ones the producer's
// priority barrier later overtakes (the producer records those).
func TestLocalRecordingUntilBarrier(t *testing.T) {
	g, p := newTestPartition(t, 1)
	ch := NewLocalChannel("local", p.Subpartition(0))
	gate := NewInputGate("g", []InputChannel{ch})
	require.NoError(t, gate.Start())
	writeSeq(t, p, 0, 30)
	p.Flush()
	in := &testRecorder{}
	ch.Persist(5, in)
	r := newSeqReader(t)
	var consumed []byte
	for range 3 {
		_, b, err := pollOne(t, gate)
		require.NoError(t, err)
		consumed = append(consumed, b.Bytes()...)
		r.feed(b)
	}
	out := &testRecorder{}
	p.BroadcastPriorityEvent(unalignedPayload(5), func(int) Recorder { return out })
	_, b, err := pollOne(t, gate)
	require.NoError(t, err)
	require.EqualValues(t, 5, barrierOf(t, b))
	b.Release()
	require.Equal(t, consumed, in.data())
	n := len(out.items)
	for range n {
		_, b, err := pollOne(t, gate)
		require.NoError(t, err)
		r.feed(b)
	}
	require.Equal(t, consumed, in.data(), "nothing after the barrier")
	require.Equal(t, 30, r.next)
	r.d.Close()
	gate.Close()
	p.Release()
	require.Zero(t, g.InUse())
}

// Over TCP: an unaligned barrier overtakes the buffers queued at the
// server (waiting for credit) and those queued in the client's channel;
// the producer records the first, the consumer's Persist the second, and
// with the consumer's partial record they are the whole stream up to the
// barrier, records spanning buffers included.
func TestTCPPriorityBarrierAndChannelState(t *testing.T) {
	ts := startServer(t, ServerConfig{})
	g, p := newTestPartition(t, 1)
	require.NoError(t, ts.parts.Register(p))
	cm := newManager(t, ClientConfig{})
	rg := newRemoteGate(t, cm, ts.addr, p.ID(), []int{0}, 256)
	require.NoError(t, rg.gate.Start())
	ch := rg.chans[0]
	writeSeq(t, p, 0, 40)
	p.Flush()
	r := newSeqReader(t)
	for range 3 {
		_, b, err := pollOne(t, rg.gate)
		require.NoError(t, err)
		r.feed(b)
	}
	partial := r.d.AppendUnconsumed(nil)
	// The client's buffers fill up (10 receive buffers, no consumer).
	waitFor(t, func() bool {
		ch.mu.Lock()
		defer ch.mu.Unlock()
		return len(ch.mu.queue)-ch.mu.head == 10
	})
	out := &testRecorder{}
	p.BroadcastPriorityEvent(unalignedPayload(9), func(int) Recorder { return out })
	writeSeq(t, p, 40, 50)
	p.Finish(eop)
	waitPriority(t, ch)

	_, b, err := pollOne(t, rg.gate)
	require.NoError(t, err)
	require.Equal(t, buffer.PriorityEvent, b.Type())
	require.EqualValues(t, 9, barrierOf(t, b))
	b.Release()
	in := &testRecorder{}
	ch.Persist(9, in)
	require.Len(t, in.items, 10, "the client's queued buffers")

	replay := newSeqReader(t)
	replay.next = r.next
	replay.feedBytes(partial)
	replay.feedBytes(in.data())
	replay.feedBytes(out.data())
	require.False(t, replay.d.Pending())
	barrierAt := replay.next

	for {
		_, b, err := pollOne(t, rg.gate)
		require.NoError(t, err)
		if !b.IsData() {
			require.Equal(t, eop, b.Bytes())
			b.Release()
			break
		}
		r.feed(b)
	}
	require.Equal(t, 50, r.next)
	require.Greater(t, barrierAt, 3)
	r.d.Close()
	replay.d.Close()
	require.NoError(t, cm.Close())
	rg.closeAndCheck(t)
	p.ReleaseProducer()
	waitFor(t, func() bool { return g.InUse() == 0 })
}

// Over TCP: a timeoutable barrier is announced by the client as it
// arrives; a channel recording a checkpoint whose barrier has not come
// records every arrival until it; overtaking the announced barrier blocks
// the channel, and Resume sends RESUME_CONSUMPTION.
func TestTCPAnnouncementAndRecording(t *testing.T) {
	ts := startServer(t, ServerConfig{})
	g, p := newTestPartition(t, 1)
	require.NoError(t, ts.parts.Register(p))
	cm := newManager(t, ClientConfig{})
	rg := newRemoteGate(t, cm, ts.addr, p.ID(), []int{0}, 256)
	require.NoError(t, rg.gate.Start())
	ch := rg.chans[0]
	in := &testRecorder{}
	ch.Persist(2, in) // nothing queued yet: records arrivals
	writeSeq(t, p, 0, 6)
	p.BroadcastEvent(timeoutablePayload(2), buffer.TimeoutableAlignedBarrier)
	writeSeq(t, p, 6, 12)
	p.Flush()
	waitPriority(t, ch)

	_, b, err := pollOne(t, rg.gate)
	require.NoError(t, err)
	ev, err := wire.DecodeEvent(b.Bytes())
	require.NoError(t, err)
	require.Equal(t, wire.EventAnnouncement, ev.Kind)
	require.EqualValues(t, 2, ev.Announced.Barrier.ID)
	b.Release()
	ch.PrioritizeBarrier(2)

	r := newSeqReader(t)
	var got []byte
	for r.next < 6 {
		_, b, err := pollOne(t, rg.gate)
		require.NoError(t, err)
		got = append(got, b.Bytes()...)
		r.feed(b)
	}
	require.Equal(t, got, in.data(), "every arrival up to the barrier")
	_, b, err = rg.gate.PollNext()
	require.NoError(t, err)
	require.Nil(t, b, "the server holds the rest until RESUME_CONSUMPTION")
	rg.gate.Resume(0)
	for r.next < 12 {
		_, b, err := pollOne(t, rg.gate)
		require.NoError(t, err)
		r.feed(b)
	}
	require.Equal(t, got, in.data())
	p.Finish(eop)
	_, b, err = pollOne(t, rg.gate)
	require.NoError(t, err)
	require.Equal(t, eop, b.Bytes())
	b.Release()
	r.d.Close()
	require.NoError(t, cm.Close())
	rg.closeAndCheck(t)
	p.ReleaseProducer()
	waitFor(t, func() bool { return g.InUse() == 0 })
}

// waitPriority waits until a priority item reached ch (it overtakes what
// is queued there only once it arrived).
func waitPriority(t testing.TB, ch *RemoteChannel) {
	t.Helper()
	waitFor(t, func() bool {
		ch.mu.Lock()
		defer ch.mu.Unlock()
		return len(ch.mu.prio) > 0
	})
}

// NEW_BUFFER_SIZE reaches the producer's subpartition, which cuts its next
// buffers at that size; locally SetBufferSize does the same.
func TestNewBufferSize(t *testing.T) {
	ts := startServer(t, ServerConfig{})
	g, p := newTestPartition(t, 1)
	require.NoError(t, ts.parts.Register(p))
	cm := newManager(t, ClientConfig{})
	rg := newRemoteGate(t, cm, ts.addr, p.ID(), []int{0}, 256)
	require.NoError(t, rg.gate.Start())
	rg.chans[0].SetBufferSize(100)
	waitFor(t, func() bool { return p.Subpartition(0).BufferSize() == MinBufferSize })
	rg.chans[0].SetBufferSize(300) // above the segment: whole segments
	waitFor(t, func() bool { return p.Subpartition(0).BufferSize() == 300 })

	p.Subpartition(0).SetBufferSize(64)
	require.Equal(t, MinBufferSize, p.Subpartition(0).BufferSize())
	g2, p2 := newTestPartition(t, 1)
	g3, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: 1024, NumSegments: 64})
	require.NoError(t, err)
	pool, err := g3.NewLocalPool(2, 64)
	require.NoError(t, err)
	p3, err := NewResultPartition(newID(), "big", 1, pool)
	require.NoError(t, err)
	p3.Subpartition(0).SetBufferSize(300)
	writeSeq(t, p3, 0, 20)
	p3.Flush()
	r := newSeqReader(t)
	for b := p3.Subpartition(0).Poll().Buffer; b != nil; b = p3.Subpartition(0).Poll().Buffer {
		require.LessOrEqual(t, b.Len(), 300)
		r.feed(b)
	}
	require.Equal(t, 20, r.next)
	r.d.Close()
	p3.Release()
	require.Zero(t, g3.InUse())
	p2.Release()
	require.Zero(t, g2.InUse())

	require.NoError(t, cm.Close())
	rg.closeAndCheck(t)
	p.Release()
	require.Zero(t, g.InUse())
}
