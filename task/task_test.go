package task

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
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
	running  int
	acked    []barrier.CheckpointID
	declined []error
}

func (a *acks) Running(state.TaskKey) {
	a.mu.Lock()
	a.running++
	a.mu.Unlock()
}

func (a *acks) Acknowledge(_ state.TaskKey, id barrier.CheckpointID, _ state.TaskSnapshot, _ CheckpointMetrics) {
	a.mu.Lock()
	a.acked = append(a.acked, id)
	a.mu.Unlock()
}

func (a *acks) Finishing(state.TaskKey) {}

func (a *acks) Finished(state.TaskKey) {}

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
	// The task has no default state backend: the root package decides it.
	_, err = New(Config{Name: "x", Source: &countSource{}, Operators: []Operator{&keyedTestOp{}}})
	require.ErrorContains(t, err, "without a keyed state backend")
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
	requireDeclined(t, a.declined[0], barrier.DeclineTaskFinished)
}

// errSource fails its first poll with err, after calling before.
type errSource struct {
	err    error
	before func()
}

func (s *errSource) PollNext() (SourceStatus, error) {
	if s.before != nil {
		s.before()
	}
	return MoreAvailable, s.err
}

func (s *errSource) Available() <-chan struct{} { return nil }

// The outcome comes from Run's context: an error that wraps
// context.Canceled while the context is live is the task's failure; once
// the context ended (with a cause or not), the same error is the
// cancellation's consequence.
func TestOutcomeDecidedByRunsContext(t *testing.T) {
	lookup := fmt.Errorf("lookup: %w", context.Canceled)
	for name, c := range map[string]struct {
		err    error
		cancel func(context.CancelCauseFunc)
		want   State
	}{
		"wraps Canceled, context live":         {err: lookup, want: Failed},
		"wraps DeadlineExceeded, context live": {err: fmt.Errorf("rpc: %w", context.DeadlineExceeded), want: Failed},
		"plain error, context live":            {err: errors.New("boom"), want: Failed},
		"context canceled":                     {err: context.Canceled, cancel: func(c context.CancelCauseFunc) { c(nil) }, want: Canceled},
		"context canceled with a cause":        {err: context.Canceled, cancel: func(c context.CancelCauseFunc) { c(errors.New("other task failed")) }, want: Canceled},
		"the cause itself":                     {err: lookup, cancel: func(c context.CancelCauseFunc) { c(lookup) }, want: Canceled},
		"plain error after the context's end":  {err: errors.New("boom"), cancel: func(c context.CancelCauseFunc) { c(nil) }, want: Failed},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			src := &errSource{err: c.err}
			if c.cancel != nil {
				src.before = func() { c.cancel(cancel) }
			}
			tk, err := New(Config{Name: "src", Source: src})
			require.NoError(t, err)
			err = tk.Run(ctx)
			require.ErrorIs(t, err, c.err)
			require.Equal(t, c.want, tk.State())
		})
	}
}

type finishHook struct {
	testOp
	onFinish func()
}

func (o *finishHook) Finish() error { o.onFinish(); return o.testOp.Finish() }

func requireDeclined(t *testing.T, err error, want barrier.DeclineReason) {
	t.Helper()
	var de *barrier.DeclineError
	require.ErrorAs(t, err, &de)
	require.Equal(t, want, de.Reason, "%v", err)
}

// The stall of a restarted job: a trigger that reaches a source task
// before it runs is kept and taken once the task is open, after the task
// reported running; it is never declined as if the task had finished.
func TestTriggerBeforeRunIsTakenOnceRunning(t *testing.T) {
	a := &acks{}
	op := &testOp{id: "op"}
	src := &countSource{n: 1000, failAt: -1}
	tk, err := New(Config{Name: "src", Source: src, Operators: []Operator{op},
		Checkpoint: &CheckpointConfig{Storage: state.NewMemoryStorage(), Responder: a}})
	require.NoError(t, err)
	tk.TriggerCheckpoint(barrier.Barrier{ID: 1})
	src.onPoll = func(i int) {
		if i == 0 {
			a.mu.Lock()
			defer a.mu.Unlock()
			require.Equal(t, 1, a.running, "running reported before input")
			require.Equal(t, 1, op.snapshots, "the early trigger ran before the first record")
		}
	}
	require.NoError(t, tk.Run(context.Background()))
	require.Empty(t, a.declined)
	require.Equal(t, []barrier.CheckpointID{1}, a.acked)
}

// A trigger that reaches a task whose input ended is declined as
// finished, and one posted to a failed task as canceled: neither counts
// as a checkpoint failure.
func TestTriggerAfterEndDeclinesWithReason(t *testing.T) {
	a := &acks{}
	var tk *Task
	// A trigger posted while the task finishes (after its last mailbox
	// step) is dropped when the mailbox closes, and declined.
	op := &finishHook{testOp: testOp{id: "op"}, onFinish: func() { tk.TriggerCheckpoint(barrier.Barrier{ID: 3}) }}
	tk, err := New(Config{Name: "src", Source: &countSource{n: 10, failAt: -1}, Operators: []Operator{op},
		Checkpoint: &CheckpointConfig{Storage: state.NewMemoryStorage(), Responder: a}})
	require.NoError(t, err)
	require.NoError(t, tk.Run(context.Background()))
	require.Len(t, a.declined, 1)
	requireDeclined(t, a.declined[0], barrier.DeclineTaskFinished)

	b := &acks{}
	tk, err = New(Config{Name: "src", Source: &countSource{n: 10, failAt: 3},
		Checkpoint: &CheckpointConfig{Storage: state.NewMemoryStorage(), Responder: b}})
	require.NoError(t, err)
	require.Error(t, tk.Run(context.Background()))
	tk.TriggerCheckpoint(barrier.Barrier{ID: 4})
	require.Len(t, b.declined, 1)
	requireDeclined(t, b.declined[0], barrier.DeclineTaskCanceled)
}

// Mails are never dropped, however many arrive between two mailbox
// checks (a lost trigger would leave its checkpoint pending until it
// times out), and run in order.
func TestMailboxKeepsEveryMailInOrder(t *testing.T) {
	b := newMailbox()
	var ran []int
	for i := range 1000 {
		require.NoError(t, b.put(mail{run: func() error { ran = append(ran, i); return nil }}))
	}
	select {
	case <-b.signal:
	default:
		t.Fatal("no signal")
	}
	for m, ok := b.take(); ok; m, ok = b.take() {
		require.NoError(t, m.run())
	}
	require.Len(t, ran, 1000)
	for i, v := range ran {
		require.Equal(t, i, v)
	}
	_, ok := b.take()
	require.False(t, ok)
}

// Closing the mailbox is atomic with put: a mail is refused, or it is
// handed back by close to be dropped; none is lost in between.
func TestMailboxCloseRefusesOrReturns(t *testing.T) {
	b := newMailbox()
	const n = 2000
	var wg sync.WaitGroup
	var refused, accepted sync.Map
	for i := range n {
		wg.Go(func() {
			if err := b.put(mail{run: func() error { return nil }}); err != nil {
				require.ErrorIs(t, err, ErrMailboxClosed)
				refused.Store(i, true)
			} else {
				accepted.Store(i, true)
			}
		})
	}
	taken := 0
	for range 100 {
		if _, ok := b.take(); ok {
			taken++
		}
	}
	left := len(b.close())
	wg.Wait()
	nAccepted := 0
	accepted.Range(func(any, any) bool { nAccepted++; return true })
	require.Equal(t, nAccepted, taken+left, "every accepted mail was taken or returned by close")
	require.ErrorIs(t, b.put(mail{run: func() error { return nil }}), ErrMailboxClosed)
}

// keyedTestOp is a testOp with keyed state.
type keyedTestOp struct{ testOp }

func (o *keyedTestOp) Keyed() bool { return true }

// countingBackend wraps a keyed backend: it counts the asynchronous
// snapshot parts that ran, or fails its synchronous part.
type countingBackend struct {
	state.KeyedBackend
	failSync bool
	asyncRan *int
}

func (b *countingBackend) Snapshot(id barrier.CheckpointID, w state.StateWriterFactory) (state.KeyedSnapshotFunc, error) {
	if b.failSync {
		return nil, errors.New("no room")
	}
	f, err := b.KeyedBackend.Snapshot(id, w)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (*state.KeyedStateHandle, error) {
		*b.asyncRan++
		return f(ctx)
	}, nil
}

// When one chained operator's synchronous snapshot fails, the
// asynchronous parts of the operators before it still run (abandoned),
// exactly once, as the state backend contract requires; the checkpoint is
// declined as a snapshot failure.
func TestFailedSyncSnapshotReleasesEarlierParts(t *testing.T) {
	a := &acks{}
	asyncRan := 0
	made := 0
	newBackend := func(maxPar, par, index int) (state.KeyedBackend, error) {
		kb, err := heap.New(heap.Config{MaxParallelism: maxPar, Parallelism: par, Index: index})
		if err != nil {
			return nil, err
		}
		made++
		return &countingBackend{KeyedBackend: kb, failSync: made == 2, asyncRan: &asyncRan}, nil
	}
	var tk *Task
	src := &countSource{n: 100, failAt: -1}
	src.onPoll = func(i int) {
		if i == 10 {
			tk.TriggerCheckpoint(barrier.Barrier{ID: 1})
		}
	}
	tk, err := New(Config{Name: "src", Source: src,
		Operators:       []Operator{&keyedTestOp{testOp{id: "a"}}, &keyedTestOp{testOp{id: "b"}}},
		NewKeyedBackend: newBackend,
		Checkpoint:      &CheckpointConfig{Storage: state.NewMemoryStorage(), Responder: a}})
	require.NoError(t, err)
	require.NoError(t, tk.Run(context.Background()))
	require.Equal(t, 1, asyncRan, "operator a's asynchronous part ran once")
	require.Empty(t, a.acked)
	require.Len(t, a.declined, 1)
	requireDeclined(t, a.declined[0], barrier.DeclineSnapshotFailed)
}

// closeFailingBackend is a keyed backend whose Close fails (a database
// that cannot remove its working directory).
type closeFailingBackend struct{ state.KeyedBackend }

var errCloseFailed = errors.New("cannot remove the working directory")

func (b closeFailingBackend) Close() error {
	_ = b.KeyedBackend.Close()
	return errCloseFailed
}

// A keyed backend's failure to close is the task's error (it was
// dropped): a task that otherwise finished fails with it.
func TestKeyedBackendCloseErrorFailsTheTask(t *testing.T) {
	newBackend := func(maxPar, par, index int) (state.KeyedBackend, error) {
		kb, err := heap.New(heap.Config{MaxParallelism: maxPar, Parallelism: par, Index: index})
		return closeFailingBackend{kb}, err
	}
	tk, err := New(Config{Name: "src", Source: &countSource{n: 10, failAt: -1},
		Operators: []Operator{&keyedTestOp{testOp{id: "a"}}}, NewKeyedBackend: newBackend})
	require.NoError(t, err)
	err = tk.Run(context.Background())
	require.ErrorIs(t, err, errCloseFailed)
	require.ErrorContains(t, err, "operator a: close keyed state")
	require.Equal(t, Failed, tk.State())
}
