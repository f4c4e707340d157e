package task

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/network"
)

// twoInputOp is the head of a two-input chain: it reports the
// watermarks, statuses and ends of input it sees.
type twoInputOp struct {
	testOp
	events chan string
}

func (o *twoInputOp) ProcessWatermark(wm int64) (bool, error) {
	o.events <- fmt.Sprintf("watermark %d", wm)
	return true, nil
}

func (o *twoInputOp) ProcessWatermarkStatus(s eventtime.Status) (bool, error) {
	o.events <- "status " + s.String()
	return true, nil
}

func (o *twoInputOp) EndInput(i int) error {
	o.events <- fmt.Sprintf("end of input %d", i)
	return nil
}

// recordsOf collects the records of one input.
type recordsOf struct {
	mu   sync.Mutex
	recs []string
	ev   chan string
	name string
}

func (r *recordsOf) ProcessRecord(rec []byte) error {
	r.ev <- r.name + " " + string(rec)
	return nil
}

// twoInputTask runs a task whose input 0 reads partitions a0 and a1 and
// input 1 reads b; the test drives the partitions.
type twoInputTask struct {
	a0, a1, b *network.ResultPartition
	op        *twoInputOp
	events    chan string
	done      chan error
	tk        *Task
}

func startTwoInputTask(t *testing.T) *twoInputTask {
	t.Helper()
	g, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: 4096, NumSegments: 64})
	require.NoError(t, err)
	part := func(name string) *network.ResultPartition {
		pool, err := g.NewLocalPool(2, 4)
		require.NoError(t, err)
		p, err := network.NewResultPartition(uuid.New(), name, 1, pool)
		require.NoError(t, err)
		return p
	}
	x := &twoInputTask{a0: part("a0"), a1: part("a1"), b: part("b"), events: make(chan string, 64), done: make(chan error, 1)}
	gate := network.NewInputGate("gate", []network.InputChannel{
		network.NewLocalChannel("a0", x.a0.Subpartition(0)),
		network.NewLocalChannel("a1", x.a1.Subpartition(0)),
		network.NewLocalChannel("b", x.b.Subpartition(0)),
	})
	x.op = &twoInputOp{testOp: testOp{id: "co"}, events: x.events}
	tk, err := New(Config{Name: "co", Gate: gate, Operators: []Operator{x.op}, FlushAlways: true, Inputs: []Input{
		{Index: 0, Channels: 2, Processor: &recordsOf{ev: x.events, name: "input 0"}},
		{Index: 1, Channels: 1, Processor: &recordsOf{ev: x.events, name: "input 1"}},
	}})
	require.NoError(t, err)
	x.tk = tk
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, p := range []*network.ResultPartition{x.a0, x.a1, x.b} {
		p.SetContext(ctx)
	}
	go func() { x.done <- tk.Run(ctx) }()
	t.Cleanup(func() { require.Zero(t, g.InUse(), "segments leaked") })
	return x
}

// expect waits for the task to report want, in order.
func (x *twoInputTask) expect(t *testing.T, want ...string) {
	t.Helper()
	for _, w := range want {
		select {
		case got := <-x.events:
			require.Equal(t, w, got)
		case <-time.After(time.Minute):
			t.Fatalf("waiting for %q", w)
		}
	}
	select {
	case got := <-x.events:
		t.Fatalf("unexpected %q", got)
	default:
	}
}

// nothing checks that the task reports nothing after its next event
// (sent through a probe record on b).
func (x *twoInputTask) nothing(t *testing.T) {
	t.Helper()
	require.NoError(t, x.b.Write(0, []byte("probe")))
	x.b.Flush()
	x.expect(t, "input 1 probe")
}

func wmEvent(p *network.ResultPartition, wm int64) {
	p.BroadcastEvent(watermarkPayload(wm), buffer.Event)
}

func statusEvent(p *network.ResultPartition, s eventtime.Status) {
	p.BroadcastEvent(statusPayload(s), buffer.Event)
}

// A task with two inputs hands each input's records to that input's
// processor, moves its event time to the minimum of its inputs'
// watermarks (each the minimum over its own channels), leaves an idle
// input out, ends each input on its own and finishes once both ended.
func TestTwoInputTask(t *testing.T) {
	x := startTwoInputTask(t)
	require.NoError(t, x.a0.Write(0, []byte("x")))
	x.a0.Flush()
	x.expect(t, "input 0 x")

	wmEvent(x.a0, 10)
	wmEvent(x.b, 5)
	x.nothing(t) // input 0 waits for a1
	wmEvent(x.a1, 20)
	x.expect(t, "watermark 5") // input 0 at 10, input 1 at 5
	wmEvent(x.b, 30)
	x.expect(t, "watermark 10")

	// Input 1 idle: input 0 alone; input 1 back: it cannot pull the
	// watermark back, and it counts again from where it is.
	statusEvent(x.b, eventtime.Idle)
	wmEvent(x.a0, 40)
	x.expect(t, "watermark 20") // a1 holds input 0
	wmEvent(x.a1, 40)
	x.expect(t, "watermark 40")
	statusEvent(x.b, eventtime.Active)
	wmEvent(x.a0, 50)
	wmEvent(x.a1, 50)
	x.nothing(t) // input 1 is at 30 again
	wmEvent(x.b, 45)
	x.expect(t, "watermark 45")

	// Input 0 ends (both channels) long before input 1.
	x.a0.Finish(endOfPartitionPayload())
	x.a0.ReleaseProducer()
	x.nothing(t)
	x.a1.Finish(endOfPartitionPayload())
	x.a1.ReleaseProducer()
	x.expect(t, "end of input 0")
	require.NoError(t, x.b.Write(0, []byte("late")))
	x.b.Flush()
	x.expect(t, "input 1 late")
	wmEvent(x.b, eventtime.MaxWatermark)
	x.expect(t, "watermark 50")
	select {
	case err := <-x.done:
		t.Fatalf("the task ended with one input open: %v", err)
	default:
	}
	x.b.Finish(endOfPartitionPayload())
	x.b.ReleaseProducer()
	x.expect(t, "end of input 1")
	require.NoError(t, <-x.done)
	require.True(t, x.op.finished)
	require.Equal(t, 2, x.tk.NumInputs())
	require.Equal(t, int64(50), x.tk.InputWatermarkOf(0))
	require.Equal(t, eventtime.MaxWatermark, x.tk.InputWatermarkOf(1))
	require.Equal(t, int64(50), x.tk.InputWatermark())
}

func TestInputsConfigErrors(t *testing.T) {
	gate := network.NewInputGate("gate", []network.InputChannel{network.NewLocalChannel("a", nil), network.NewLocalChannel("b", nil)})
	in := &recordsOf{}
	for _, tc := range []struct {
		inputs []Input
		want   string
	}{
		{[]Input{{Index: 0, Channels: 1, Processor: in}}, "the inputs have 1 channels, the gate 2"},
		{[]Input{{Index: 0, Channels: 1, Processor: in}, {Index: 2, Channels: 1, Processor: in}}, "input 1 has no channel"},
		{[]Input{{Index: 0, Channels: 2}}, "no record processor"},
		{[]Input{{Index: -1, Channels: 2, Processor: in}}, "negative index"},
	} {
		_, err := New(Config{Name: "x", Gate: gate, Inputs: tc.inputs})
		require.ErrorContains(t, err, tc.want)
	}
	_, err := New(Config{Name: "x", Gate: gate, Input: in, Inputs: []Input{{Channels: 2, Processor: in}}})
	require.ErrorContains(t, err, "exactly one of")
}
