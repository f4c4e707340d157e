package task

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/network/debloat"
)

// slowInput counts records and sleeps now and then: a consumer much
// slower than its producer.
type slowInput struct{ n int }

func (s *slowInput) ProcessRecord([]byte) error {
	if s.n++; s.n%32 == 0 {
		time.Sleep(200 * time.Microsecond)
	}
	return nil
}

// A task with buffer debloating on shrinks its producer's buffers when it
// consumes far slower than the data in flight could drain in the target
// time, and the records all arrive.
func TestDebloatingShrinksProducerBuffers(t *testing.T) {
	g, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: 4096, NumSegments: 64})
	require.NoError(t, err)
	pool, err := g.NewLocalPool(2, 10)
	require.NoError(t, err)
	p, err := network.NewResultPartition(uuid.New(), "producer", 1, pool)
	require.NoError(t, err)
	gate := network.NewInputGate("gate", []network.InputChannel{network.NewLocalChannel("local", p.Subpartition(0))})
	in := &slowInput{}
	tk, err := New(Config{Name: "slow", Gate: gate, Input: in, Operators: []Operator{&testOp{id: "op"}},
		Debloat: &debloat.Config{Target: 10 * time.Millisecond, Period: 5 * time.Millisecond, Samples: 1, MaxSize: 4096}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.SetContext(ctx)
	done := make(chan error, 1)
	go func() { done <- tk.Run(ctx) }()

	var rec [8]byte
	written := 0
	write := func() {
		binary.BigEndian.PutUint64(rec[:], uint64(written))
		require.NoError(t, p.Write(0, rec[:]))
		written++
	}
	require.Eventually(t, func() bool {
		for range 100 {
			write()
		}
		n := p.Subpartition(0).BufferSize()
		return n > 0 && n < 4096
	}, time.Minute, time.Microsecond, "the consumer asks for smaller buffers")
	p.Finish(endOfPartitionPayload())
	p.ReleaseProducer()
	require.NoError(t, <-done)
	require.Equal(t, written, in.n)
	require.Zero(t, g.InUse())
}
