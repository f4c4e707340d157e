package network

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/network/wire"
)

func alignedPayload(id uint64) []byte {
	return wire.AppendEvent(nil, wire.Event{Kind: wire.EventBarrier, Barrier: barrier.Barrier{ID: barrier.CheckpointID(id), Timestamp: 1}})
}

// A producer woken only once k buffers were recycled (SetWakeBatch) never
// waits for ever: not while one of its subpartitions is blocked behind an
// aligned barrier whose alignment needs the other subpartition's data,
// not while unaligned barriers overtake its buffers and the consumer
// records channel state, not while the consumer holds a record that spans
// into a buffer the producer has yet to write, with overdraft buffers or
// without, whatever k (even above the pool's size). The pool is the
// smallest a partition of two subpartitions takes, so the producer waits
// for buffers all the time; every record arrives, in order. (It caught a
// wait for k free buffers, less the overdraft out counted at the wait:
// overdraft buffers recycled between the producer's count and its wait
// left it waiting for more than could come back.)
func TestWakeBatchNoDeadlock(t *testing.T) {
	for _, mode := range []string{"aligned", "unaligned"} {
		for _, k := range []int{1, 2, 3, 64} {
			for _, overdraft := range []int{0, 2} {
				t.Run(fmt.Sprintf("%s/k=%d/overdraft=%d", mode, k, overdraft), func(t *testing.T) {
					wakeBatchRun(t, mode == "unaligned", k, overdraft)
				})
			}
		}
	}
}

func wakeBatchRun(t *testing.T, unaligned bool, k, overdraft int) {
	const (
		subs    = 2
		records = 3000 // per subpartition
		every   = 97   // records between checkpoints
	)
	g, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: 256, NumSegments: 64})
	require.NoError(t, err)
	pool, err := g.NewLocalPool(subs+1, subs+1)
	require.NoError(t, err)
	pool.SetOverdraft(overdraft)
	p, err := NewResultPartition(newID(), "wake", subs, pool)
	require.NoError(t, err)
	p.SetWakeBatch(k)
	// A hang fails the test with a message rather than the test binary's
	// timeout; this is no bound on speed.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p.SetContext(ctx)
	chans := make([]*LocalChannel, subs)
	ins := make([]InputChannel, subs)
	for i := range chans {
		chans[i] = NewLocalChannel(fmt.Sprintf("wake[%d]", i), p.Subpartition(i))
		ins[i] = chans[i]
	}
	gate := NewInputGate("wake", ins)
	require.NoError(t, gate.Start())

	produced := make(chan error, 1)
	go func() {
		id := uint64(0)
		for i := 0; i < records; i++ {
			if i%every == every-1 {
				id++
				if unaligned {
					p.BroadcastPriorityEvent(unalignedPayload(id), func(int) Recorder { return &testRecorder{} })
				} else {
					p.BroadcastEvent(alignedPayload(id), buffer.AlignedBarrier)
				}
			}
			if i%5 == 0 {
				// As a task does in its mailbox before taking more input.
				if ch := p.Available(); ch != nil {
					select {
					case <-ch:
					case <-ctx.Done():
						produced <- ctx.Err()
						return
					}
				}
			}
			for s := range subs {
				if err := p.Write(s, seqRecord(i)); err != nil {
					produced <- err
					return
				}
			}
		}
		p.Finish(eop)
		p.ReleaseProducer()
		produced <- nil
	}()

	readers := make([]*seqReader, subs)
	for i := range readers {
		readers[i] = newSeqReader(t)
	}
	blocked := make([]barrier.CheckpointID, subs) // aligned: the barrier a channel stopped at
	seen := make([]barrier.CheckpointID, subs)    // the newest barrier taken from each channel
	ended := 0
	for polls := 0; ended < subs; polls++ {
		c, b, err := gate.PollNext()
		require.NoError(t, err)
		if b == nil {
			select {
			case <-gate.Ready():
			case <-ctx.Done():
				t.Fatalf("deadlock: consumer waiting, records read %d and %d of %d; blocked at %v", readers[0].next, readers[1].next, records, blocked)
			}
			continue
		}
		if polls%7 == 0 {
			runtime.Gosched() // let the producer find its pool empty
		}
		switch {
		case b.IsData():
			readers[c].feed(b)
			continue
		case b.Type() == buffer.Event:
			require.Equal(t, eop, b.Bytes())
			ended++
		case b.Type() == buffer.AlignedBarrier:
			id := barrierOf(t, b)
			seen[c], blocked[c] = id, id
			if all := blocked[0] == id && blocked[1] == id; all {
				// Aligned: every channel stopped at id; resume them.
				for i := range blocked {
					blocked[i] = 0
					gate.Resume(i)
				}
			}
		case b.Type() == buffer.PriorityEvent:
			id := barrierOf(t, b)
			seen[c] = id
			for i, ch := range chans {
				if i != c && seen[i] < id {
					// The other channel's data until its barrier is
					// channel state (copied).
					ch.Persist(id, &testRecorder{})
				}
			}
		default:
			t.Fatalf("unexpected %s buffer", b.Type())
		}
		b.Release()
	}
	require.NoError(t, <-produced)
	for i, r := range readers {
		require.Equal(t, records, r.next, "records on channel %d", i)
		require.False(t, r.d.Pending())
		r.d.Close()
	}
	gate.Close()
	require.Zero(t, g.InUse(), "segments leaked")
}
