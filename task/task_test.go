package task

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/state"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testOp struct {
	id        string
	completed []barrier.CheckpointID
	snapshots int
	finished  bool
	closed    bool
}

func (o *testOp) ID() string                                           { return o.id }
func (o *testOp) Name() string                                         { return o.id }
func (o *testOp) Keyed() bool                                          { return false }
func (o *testOp) Open(*OperatorContext) error                          { return nil }
func (o *testOp) Finish() error                                        { o.finished = true; return nil }
func (o *testOp) Close() error                                         { o.closed = true; return nil }
func (o *testOp) PrepareSnapshotPreBarrier(barrier.CheckpointID) error { return nil }
func (o *testOp) SnapshotState(barrier.CheckpointID) error             { o.snapshots++; return nil }
func (o *testOp) NotifyCheckpointComplete(id barrier.CheckpointID) error {
	o.completed = append(o.completed, id)
	return nil
}
func (o *testOp) NotifyCheckpointAborted(barrier.CheckpointID) error { return nil }

// countSource emits n records (it has no outputs) and then ends; fail makes
// record k panic.
type countSource struct {
	n, i   int
	failAt int
	onPoll func(i int)
}

func (s *countSource) PollNext() (SourceStatus, error) {
	if s.i == s.failAt {
		panic("source exploded")
	}
	if s.i == s.n {
		return EndOfInput, nil
	}
	if s.onPoll != nil {
		s.onPoll(s.i)
	}
	s.i++
	return MoreAvailable, nil
}

func (s *countSource) Available() <-chan struct{} { return nil }

type acks struct {
	mu       sync.Mutex
	acked    []barrier.CheckpointID
	declined []error
}

func (a *acks) Acknowledge(_ state.TaskKey, id barrier.CheckpointID, _ state.TaskSnapshot, _ CheckpointMetrics) {
	a.mu.Lock()
	a.acked = append(a.acked, id)
	a.mu.Unlock()
}

func (a *acks) Decline(_ state.TaskKey, _ barrier.CheckpointID, reason error) {
	a.mu.Lock()
	a.declined = append(a.declined, reason)
	a.mu.Unlock()
}

func TestConfigErrors(t *testing.T) {
	_, err := New(Config{Name: "x"})
	require.Error(t, err, "neither source nor gate")
	_, err = New(Config{Name: "x", Source: &countSource{}, BufferTimeout: -1})
	require.Error(t, err)
	_, err = New(Config{Name: "x", Source: &countSource{}, Parallelism: 200})
	require.Error(t, err, "parallelism above max parallelism")
}

func TestSourceTaskRunsToEndAndClosesOperators(t *testing.T) {
	op := &testOp{id: "op"}
	tk, err := New(Config{Name: "src", Source: &countSource{n: 1000, failAt: -1}, Operators: []Operator{op}})
	require.NoError(t, err)
	require.NoError(t, tk.Run(context.Background()))
	require.Equal(t, Finished, tk.State())
	require.True(t, op.finished)
	require.True(t, op.closed)
}

func TestPanicFailsTaskWithNamedError(t *testing.T) {
	op := &testOp{id: "op"}
	tk, err := New(Config{Name: "src (1/1)", Source: &countSource{n: 1000, failAt: 10}, Operators: []Operator{op}})
	require.NoError(t, err)
	err = tk.Run(context.Background())
	var te *Error
	require.ErrorAs(t, err, &te)
	require.Equal(t, "src (1/1)", te.Task)
	var pe *PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, Failed, tk.State())
	require.True(t, op.closed, "operators are closed on failure")
}

// A trigger posted to a running source task runs between records in its
// mailbox: the operator snapshots, the task acknowledges, and a complete
// notification reaches the operator.
func TestSourceCheckpointThroughMailbox(t *testing.T) {
	op := &testOp{id: "op"}
	a := &acks{}
	var tk *Task
	triggered := false
	src := &countSource{n: 100000, failAt: -1}
	src.onPoll = func(i int) {
		if i == 100 && !triggered {
			triggered = true
			tk.TriggerCheckpoint(barrier.Barrier{ID: 1})
		}
		if i == 5000 {
			tk.NotifyCheckpointComplete(1)
		}
	}
	var err error
	tk, err = New(Config{Name: "src", Source: src, Operators: []Operator{op},
		Checkpoint: &CheckpointConfig{Storage: state.NewMemoryStorage(), Responder: a}})
	require.NoError(t, err)
	require.NoError(t, tk.Run(context.Background()))
	require.Equal(t, []barrier.CheckpointID{1}, a.acked)
	require.Empty(t, a.declined)
	require.Equal(t, 1, op.snapshots)
	require.Equal(t, []barrier.CheckpointID{1}, op.completed)
}

func TestCancelledTaskStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	src := &countSource{n: -1, failAt: -2}
	src.onPoll = func(i int) {
		if i == 1000 {
			cancel()
		}
	}
	tk, err := New(Config{Name: "src", Source: src})
	require.NoError(t, err)
	err = tk.Run(ctx)
	require.True(t, errors.Is(err, context.Canceled))
	require.Equal(t, Canceled, tk.State())
	// A late trigger on a stopped task is declined, never lost.
	a := &acks{}
	tk2, err := New(Config{Name: "src2", Source: &countSource{n: 1, failAt: -1},
		Checkpoint: &CheckpointConfig{Storage: state.NewMemoryStorage(), Responder: a}})
	require.NoError(t, err)
	require.NoError(t, tk2.Run(context.Background()))
	tk2.TriggerCheckpoint(barrier.Barrier{ID: 7})
	require.Len(t, a.declined, 1)
	require.ErrorIs(t, a.declined[0], ErrNotRunning)
}

// Mails are never dropped, however many arrive between two mailbox
// checks (a lost trigger would leave its checkpoint pending until it
// times out), and run in order.
func TestMailboxKeepsEveryMailInOrder(t *testing.T) {
	b := newMailbox()
	var ran []int
	for i := range 1000 {
		b.put(func() error { ran = append(ran, i); return nil })
	}
	select {
	case <-b.signal:
	default:
		t.Fatal("no signal")
	}
	for m := b.take(); m != nil; m = b.take() {
		require.NoError(t, m())
	}
	require.Len(t, ran, 1000)
	for i, v := range ran {
		require.Equal(t, i, v)
	}
	require.Nil(t, b.take())
}
