package task

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/network/wire"
)

// A task restored as finished runs nothing: it takes the end of partition
// of its input and ends. Anything else on that channel is bad input and
// fails the task: a record (its producer had finished too), or an event
// that does not decode (it was skipped before, and the task finished as
// if nothing had come).
func TestRestoredFinishedTaskRefusesBadInput(t *testing.T) {
	for name, c := range map[string]struct {
		write   func(p *network.ResultPartition)
		wantErr string
	}{
		"end of partition only": {write: func(*network.ResultPartition) {}},
		"a corrupt event": {write: func(p *network.ResultPartition) {
			p.BroadcastEvent([]byte{0xff, 0x01, 0x02}, buffer.Event)
		}, wantErr: "channel in: "},
		"a record": {write: func(p *network.ResultPartition) {
			require.NoError(t, p.Write(0, []byte("late record")))
			p.Flush()
		}, wantErr: errDataForFinished.Error()},
	} {
		t.Run(name, func(t *testing.T) {
			g, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: 4096, NumSegments: 8})
			require.NoError(t, err)
			pool, err := g.NewLocalPool(2, 4)
			require.NoError(t, err)
			p, err := network.NewResultPartition(uuid.New(), "producer", 1, pool)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			p.SetContext(ctx)
			gate := network.NewInputGate("gate", []network.InputChannel{network.NewLocalChannel("in", p.Subpartition(0))})
			tk, err := New(Config{Name: "finished", Gate: gate, Input: &slowInput{}, Operators: []Operator{&testOp{id: "op"}},
				Restore: &RestoreConfig{ID: 3, Finished: map[int]bool{0: true}}})
			require.NoError(t, err)

			c.write(p)
			p.Finish(wire.AppendEvent(nil, wire.Event{Kind: wire.EventEndOfPartition}))
			p.ReleaseProducer()
			err = tk.Run(ctx)
			if c.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, Finished, tk.State())
			} else {
				require.ErrorContains(t, err, c.wantErr)
				require.Equal(t, Failed, tk.State())
			}
			gate.Close()
			p.Release()
			require.Zero(t, g.InUse(), "every buffer returned")
		})
	}
}
