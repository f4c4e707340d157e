package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/internal/clock"
	"github.com/weirstream/weir/state"
)

var (
	src   = state.TaskKey{Vertex: "src", Subtask: 0}
	mid   = state.TaskKey{Vertex: "map", Subtask: 0}
	sink  = state.TaskKey{Vertex: "sink", Subtask: 0}
	tasks = []state.TaskKey{src, mid, sink}
)

// fakeGateway records calls; if ack is set it acknowledges every trigger
// for all tasks, synchronously, from inside TriggerCheckpoint.
type fakeGateway struct {
	c       *CheckpointCoordinator
	mu      sync.Mutex
	ack     bool
	fail    error
	trigger []barrier.Barrier
	done    map[barrier.CheckpointID]int
	aborted map[barrier.CheckpointID]int
}

func newGateway(c *CheckpointCoordinator, ack bool) *fakeGateway {
	return &fakeGateway{c: c, ack: ack, done: map[barrier.CheckpointID]int{}, aborted: map[barrier.CheckpointID]int{}}
}

func (g *fakeGateway) TriggerCheckpoint(task state.TaskKey, b barrier.Barrier) error {
	g.mu.Lock()
	g.trigger = append(g.trigger, b)
	ack, fail := g.ack, g.fail
	g.mu.Unlock()
	if fail != nil {
		return fail
	}
	if ack {
		for i, t := range tasks {
			g.c.Acknowledge(t, b.ID, snap(int64(100+i)), TaskCheckpointMetrics{
				AlignmentDuration: time.Duration(i) * time.Millisecond, StartDelay: time.Duration(i) * time.Second})
		}
	}
	return nil
}

func (g *fakeGateway) NotifyCheckpointComplete(_ state.TaskKey, id barrier.CheckpointID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.done[id]++
}

func (g *fakeGateway) NotifyCheckpointAborted(_ state.TaskKey, id barrier.CheckpointID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.aborted[id]++
}

func (g *fakeGateway) triggers() []barrier.Barrier {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.trigger)
}

func (g *fakeGateway) completed(id barrier.CheckpointID) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.done[id]
}

func (g *fakeGateway) abortedCount(id barrier.CheckpointID) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.aborted[id]
}

// fakeStorage keeps metadata in memory; failWrite makes WriteMetadata fail.
type fakeStorage struct {
	// slow, if set, holds every Discard and ExportSavepoint until it is
	// closed.
	slow      chan struct{}
	mu        sync.Mutex
	failWrite bool
	meta      map[barrier.CheckpointID]state.Metadata
	discarded []barrier.CheckpointID
	exported  map[string]state.Metadata
}

func newStorage() *fakeStorage {
	return &fakeStorage{meta: map[barrier.CheckpointID]state.Metadata{}, exported: map[string]state.Metadata{}}
}

func (s *fakeStorage) WriteMetadata(m state.Metadata) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failWrite {
		return errors.New("disk full")
	}
	s.meta[m.ID] = m
	return nil
}

func (s *fakeStorage) Discard(id barrier.CheckpointID) error {
	if s.slow != nil {
		<-s.slow
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.meta, id)
	s.discarded = append(s.discarded, id)
	return nil
}

func (s *fakeStorage) ExportSavepoint(m state.Metadata, dir string) (string, error) {
	if s.slow != nil {
		<-s.slow
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := fmt.Sprintf("%s/savepoint-%d", dir, m.ID)
	s.exported[p] = m
	return p, nil
}

func (s *fakeStorage) ids() []barrier.CheckpointID {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []barrier.CheckpointID
	for id := range s.meta {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (s *fakeStorage) setFailWrite(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failWrite = v
}

type failures struct {
	mu   sync.Mutex
	errs []error
}

func (f *failures) record(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, err)
}

func (f *failures) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.errs)
}

// harness starts a coordinator and its Run loop inside a synctest bubble.
type harness struct {
	c     *CheckpointCoordinator
	gw    *fakeGateway
	st    *fakeStorage
	fails *failures
	run   chan error
}

func start(t *testing.T, cfg Config, ack bool, opts ...Option) *harness {
	t.Helper()
	h := &harness{st: newStorage(), fails: &failures{}, run: make(chan error, 1)}
	opts = append([]Option{WithLogger(zaptest.NewLogger(t)), WithRandSeed(1), OnFailure(h.fails.record)}, opts...)
	c, err := New(cfg, h.st, opts...)
	require.NoError(t, err)
	h.c = c
	h.gw = newGateway(c, ack)
	attachRunning(t, c, h.gw)
	go func() { h.run <- c.Run(context.Background()) }()
	t.Cleanup(func() {
		require.NoError(t, c.Close())
		require.NoError(t, <-h.run)
	})
	return h
}

func TestNewRejectsBadInput(t *testing.T) {
	_, err := New(Config{Interval: -1}, newStorage())
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = New(Config{}, nil)
	require.Error(t, err)
}

func TestDriverPeriodicCheckpoints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		begin := time.Now()
		h := start(t, Config{Interval: 10 * time.Second, Retained: 2}, true)
		synctest.Wait()
		require.Empty(t, h.gw.triggers())

		time.Sleep(10 * time.Second) // the initial delay is at most the interval
		synctest.Wait()
		trig := h.gw.triggers()
		require.Len(t, trig, 1)
		first := time.UnixMilli(trig[0].Timestamp)
		require.False(t, first.Before(begin))
		require.False(t, first.After(begin.Add(10*time.Second)))

		time.Sleep(26 * time.Second) // 36s: four triggers at a 10s fixed rate
		synctest.Wait()
		trig = h.gw.triggers()
		require.Len(t, trig, 4)
		for i, b := range trig {
			require.Equal(t, barrier.CheckpointID(i+1), b.ID)
			require.Equal(t, barrier.Options{Kind: barrier.Checkpoint, Alignment: barrier.Aligned}, b.Options)
			if i > 0 {
				require.Equal(t, int64(10_000), b.Timestamp-trig[i-1].Timestamp, "fixed rate")
			}
			require.Equal(t, 3, h.gw.completed(b.ID))
		}
		require.Equal(t, []barrier.CheckpointID{3, 4}, h.st.ids())
		m, ok := h.c.LatestCompleted()
		require.True(t, ok)
		require.Equal(t, barrier.CheckpointID(4), m.ID)
		require.Len(t, m.Tasks, 3)

		st := h.c.Stats()
		require.Equal(t, 4, st.Completed)
		require.Equal(t, 0, st.Failed)
		require.Equal(t, 0, st.InProgress)
		require.Len(t, st.History, 4)
		latest := st.History[0]
		require.Equal(t, barrier.CheckpointID(4), latest.ID)
		require.Equal(t, Completed, latest.Status)
		require.Equal(t, 3, latest.Acknowledged)
		require.Equal(t, int64(303), latest.StateSize)
		require.Equal(t, 2*time.Millisecond, latest.PerTask[sink].AlignmentDuration)
		require.Equal(t, 2*time.Second, latest.PerTask[sink].StartDelay)
		require.Equal(t, int64(102), latest.PerTask[sink].StateSize)
		require.Equal(t, latest.ID, st.LatestCompleted.ID)
	})
}

// TestDriverSlowStorageDelaysNoTrigger: while a discard and a savepoint
// export hang in storage, periodic checkpoints still trigger on time and
// complete once the storage calls before them are done; the storage
// calls run in the order they were decided.
func TestDriverSlowStorageDelaysNoTrigger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStorage()
		st.slow = make(chan struct{})
		c, err := New(Config{Interval: 10 * time.Second, Retained: 1, MaxConcurrent: 3}, st, WithRandSeed(1), WithLogger(zaptest.NewLogger(t)))
		require.NoError(t, err)
		gw := newGateway(c, true)
		attachRunning(t, c, gw)
		run := make(chan error, 1)
		go func() { run <- c.Run(t.Context()) }()

		time.Sleep(20 * time.Second) // checkpoints 1 and 2; retention's discard of 1 hangs
		synctest.Wait()
		require.Len(t, gw.triggers(), 2)
		sp := make(chan error, 1)
		go func() {
			_, err := c.TriggerSavepoint(t.Context(), "/sp") // its export waits behind the discard
			sp <- err
		}()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		trig := gw.triggers()
		// 4 and 5 on time; 6 waits for a slot (MaxConcurrent 3: 3, 4, 5
		// wait for their metadata, behind the discard).
		require.Len(t, trig, 5, "the periodic trigger went on while storage hung")
		require.Equal(t, barrier.Savepoint, trig[2].Options.Kind)
		require.Equal(t, int64(10_000), trig[3].Timestamp-trig[1].Timestamp)
		require.Equal(t, int64(10_000), trig[4].Timestamp-trig[3].Timestamp)
		require.Equal(t, 3, c.Stats().InProgress)
		close(st.slow)
		synctest.Wait()
		require.NoError(t, <-sp)
		// in decided order: retention's discard of 1, the savepoint's
		// staging files, then retention as 4, 5 and 6 completed
		require.Equal(t, []barrier.CheckpointID{1, 3, 2, 4, 5}, st.discarded)
		require.Equal(t, []barrier.CheckpointID{6}, st.ids())
		require.Len(t, gw.triggers(), 6)
		require.NoError(t, c.Close())
		require.NoError(t, <-run)
	})
}

func TestDriverTimeoutFailsJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Config{Interval: time.Minute, Timeout: 30 * time.Second, TolerableFailures: 1}, false)
		time.Sleep(time.Minute)
		synctest.Wait()
		require.Len(t, h.gw.triggers(), 1)
		st := h.c.Stats()
		require.Equal(t, 1, st.InProgress)
		require.Equal(t, InProgress, st.History[0].Status)

		time.Sleep(30 * time.Second) // 1 expires (the first may come before 1m)
		synctest.Wait()
		require.Equal(t, 3, h.gw.abortedCount(1))
		require.Equal(t, 0, h.fails.count())
		time.Sleep(90 * time.Second) // 2 expires too
		synctest.Wait()
		require.Equal(t, 3, h.gw.abortedCount(2))
		require.Equal(t, 1, h.fails.count())
		require.ErrorIs(t, h.fails.errs[0], ErrTooManyFailures)
		require.ErrorIs(t, h.fails.errs[0], ErrExpired)
		st = h.c.Stats()
		require.Equal(t, 2, st.Failed)
		require.ErrorIs(t, st.LatestFailed.Failure, ErrExpired)
		require.Equal(t, 30*time.Second, st.LatestFailed.Duration)
	})
}

func TestDriverManualCheckpointAndSavepoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Config{}, true)
		m, err := h.c.TriggerCheckpoint(t.Context())
		require.NoError(t, err)
		require.Equal(t, barrier.CheckpointID(1), m.ID)
		require.Equal(t, []barrier.CheckpointID{1}, h.st.ids())

		path, err := h.c.TriggerSavepoint(t.Context(), "/sp")
		require.NoError(t, err)
		require.Equal(t, "/sp/savepoint-2", path)
		require.Equal(t, barrier.Savepoint, h.gw.triggers()[1].Options.Kind)
		require.Zero(t, h.gw.completed(2), "a savepoint commits no side effects")

		m, err = h.c.TriggerCheckpoint(t.Context())
		require.NoError(t, err)
		require.Equal(t, barrier.CheckpointID(3), m.ID)
		synctest.Wait() // discards run on the storage goroutine
		// retention (1) discarded checkpoint 1; the savepoint export stays
		require.Equal(t, []barrier.CheckpointID{3}, h.st.ids())
		require.Contains(t, h.st.exported, "/sp/savepoint-2")
		latest, _ := h.c.LatestCompleted()
		require.Equal(t, barrier.CheckpointID(3), latest.ID)
		require.Equal(t, "/sp/savepoint-2", h.c.Stats().History[1].SavepointPath)

		_, err = h.c.TriggerSavepoint(t.Context(), "")
		require.Error(t, err)
	})
}

func TestDriverMetadataWriteFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Config{}, true)
		_, err := h.c.TriggerCheckpoint(t.Context())
		require.NoError(t, err)
		h.st.setFailWrite(true)
		_, err = h.c.TriggerCheckpoint(t.Context())
		var cerr *CheckpointError
		require.ErrorAs(t, err, &cerr)
		require.Equal(t, barrier.CheckpointID(2), cerr.ID)
		require.ErrorIs(t, err, ErrFinalize)
		synctest.Wait()
		require.Equal(t, 1, h.fails.count(), "counts as a failure; tolerable is 0")
		m, ok := h.c.LatestCompleted()
		require.True(t, ok)
		require.Equal(t, barrier.CheckpointID(1), m.ID)
		require.Equal(t, []barrier.CheckpointID{1}, h.st.ids())
		require.Equal(t, 3, h.gw.abortedCount(2))
	})
}

func TestDriverManualTriggerQueuedAndCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Config{Interval: time.Minute}, false)
		time.Sleep(time.Minute)
		synctest.Wait()
		require.Len(t, h.gw.triggers(), 1) // 1 pending, max concurrent 1

		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := h.c.TriggerCheckpoint(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		res := make(chan error, 1)
		go func() {
			m, err := h.c.TriggerCheckpoint(t.Context())
			if err == nil && m.ID != 2 {
				err = fmt.Errorf("got checkpoint %d", m.ID)
			}
			res <- err
		}()
		synctest.Wait()
		require.Len(t, h.gw.triggers(), 1, "queued behind checkpoint 1")
		for _, task := range tasks {
			h.c.Acknowledge(task, 1, snap(1), TaskCheckpointMetrics{})
		}
		synctest.Wait()
		require.Len(t, h.gw.triggers(), 2)
		for _, task := range tasks {
			h.c.Acknowledge(task, 2, snap(1), TaskCheckpointMetrics{})
		}
		require.NoError(t, <-res)
	})
}

func TestDriverDetachAndReattach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Config{Interval: time.Minute}, false)
		time.Sleep(time.Minute)
		synctest.Wait()
		require.Len(t, h.gw.triggers(), 1)
		h.c.Detach(errors.New("task failed"))
		synctest.Wait()
		require.Equal(t, 3, h.gw.abortedCount(1))
		_, err := h.c.TriggerCheckpoint(t.Context())
		require.ErrorIs(t, err, ErrNotAttached)

		// a late ack of the old attempt: its state is discarded
		h.c.Acknowledge(mid, 1, snap(1), TaskCheckpointMetrics{})
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		require.Len(t, h.gw.triggers(), 1, "scheduler paused while detached")

		gw2 := newGateway(h.c, true)
		attachRunning(t, h.c, gw2)
		require.ErrorIs(t, h.c.Attach([]state.TaskKey{src}, tasks, gw2), ErrAttached)
		time.Sleep(time.Minute)
		synctest.Wait()
		require.Equal(t, barrier.CheckpointID(2), gw2.triggers()[0].ID)
		require.Equal(t, 3, gw2.completed(2))
	})
}

func TestDriverRestoreContinuesIDs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStorage()
		c, err := New(Config{}, st)
		require.NoError(t, err)
		require.NoError(t, c.Restore(state.Metadata{ID: 41, Kind: barrier.Checkpoint}, true))
		gw := newGateway(c, true)
		attachRunning(t, c, gw)
		require.ErrorIs(t, c.Restore(state.Metadata{ID: 1}, true), ErrAttached)
		ctx, cancel := context.WithCancel(t.Context())
		run := make(chan error, 1)
		go func() { run <- c.Run(ctx) }()
		synctest.Wait()
		require.ErrorIs(t, c.Run(ctx), ErrRunning)
		m, err := c.TriggerCheckpoint(t.Context())
		require.NoError(t, err)
		require.Equal(t, barrier.CheckpointID(42), m.ID)
		synctest.Wait()
		require.Contains(t, st.discarded, barrier.CheckpointID(41)) // retention 1
		cancel()
		require.NoError(t, <-run)
		require.NoError(t, c.Close())
	})
}

func TestDriverCloseAndShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStorage()
		c, err := New(Config{Interval: time.Minute}, st)
		require.NoError(t, err)
		gw := newGateway(c, true)
		attachRunning(t, c, gw)
		run := make(chan error, 1)
		go func() { run <- c.Run(t.Context()) }()
		_, err = c.TriggerCheckpoint(t.Context())
		require.NoError(t, err)

		gw.mu.Lock()
		gw.ack = false
		gw.mu.Unlock()
		res := make(chan error, 1)
		go func() {
			_, err := c.TriggerCheckpoint(t.Context())
			res <- err
		}()
		synctest.Wait()

		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() { _ = c.Shutdown(JobCanceled) })
		}
		wg.Wait()
		require.NoError(t, <-run)
		require.ErrorIs(t, <-res, ErrClosed)
		require.Equal(t, 3, gw.abortedCount(2))
		require.Empty(t, st.ids(), "canceled without RetainOnCancel deletes")
		_, ok := c.LatestCompleted()
		require.False(t, ok)

		require.ErrorIs(t, c.Shutdown(JobFailed), ErrClosed)
		require.NoError(t, c.Close())
		require.ErrorIs(t, c.Run(t.Context()), ErrClosed)
		_, err = c.TriggerCheckpoint(t.Context())
		require.ErrorIs(t, err, ErrClosed)
		require.ErrorIs(t, c.Attach([]state.TaskKey{src}, tasks, gw), ErrClosed)
		// after close, a late ack is still cleaned up, inline
		c.Acknowledge(mid, 2, snap(1), TaskCheckpointMetrics{})
		require.Equal(t, barrier.CheckpointID(2), st.discarded[len(st.discarded)-1])
	})
}

func TestDriverCloseRetains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Config{}, true)
		_, err := h.c.TriggerCheckpoint(t.Context())
		require.NoError(t, err)
		require.NoError(t, h.c.Close())
		require.Equal(t, []barrier.CheckpointID{1}, h.st.ids())
	})
}

func TestDriverTriggerFailureAborts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Config{}, false)
		h.gw.mu.Lock()
		h.gw.fail = errors.New("task not running")
		h.gw.mu.Unlock()
		_, err := h.c.TriggerCheckpoint(t.Context())
		require.ErrorIs(t, err, ErrTriggerFailed)
		synctest.Wait()
		require.Equal(t, 0, h.fails.count(), "trigger failures do not count")
	})
}

func TestDriverManualClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewManual(t0)
		h := start(t, Config{Interval: time.Minute, Timeout: time.Minute}, false, WithClock(clk))
		synctest.Wait()
		next, ok := clk.Next()
		require.True(t, ok)
		require.False(t, next.After(t0.Add(time.Minute)))
		clk.Set(next)
		synctest.Wait()
		trig := h.gw.triggers()
		require.Len(t, trig, 1)
		require.Equal(t, next.UnixMilli(), trig[0].Timestamp)
		clk.Advance(time.Minute)
		synctest.Wait()
		require.Equal(t, 3, h.gw.abortedCount(1))
		require.Equal(t, 1, h.fails.count())
	})
}

func TestDriverUnalignedOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Config{Unaligned: true, AlignedTimeout: time.Second}, true)
		_, err := h.c.TriggerCheckpoint(t.Context())
		require.NoError(t, err)
		_, err = h.c.TriggerSavepoint(t.Context(), "/sp")
		require.NoError(t, err)
		trig := h.gw.triggers()
		require.Equal(t, barrier.Options{Kind: barrier.Checkpoint, Alignment: barrier.AlignedWithTimeout, AlignmentTimeout: time.Second}, trig[0].Options)
		require.Equal(t, barrier.Options{Kind: barrier.Savepoint, Alignment: barrier.Aligned}, trig[1].Options)
	})
}

// attachRunning attaches tasks (source src) and reports them all running.
func attachRunning(t *testing.T, c *CheckpointCoordinator, gw TaskGateway) {
	t.Helper()
	require.NoError(t, c.Attach([]state.TaskKey{src}, tasks, gw))
	for _, k := range tasks {
		c.TaskRunning(k)
	}
}

// TestRestoreRetainedInOrder: a coordinator taking over a job is seeded
// with the retained checkpoints an earlier one left, oldest first, then
// the latest; retention keeps the newest Retained of them and discards
// the rest in order as new checkpoints complete.
func TestRestoreRetainedInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStorage()
		c, err := New(Config{Interval: 10 * time.Second, Retained: 3}, st, WithRandSeed(1), WithLogger(zaptest.NewLogger(t)))
		require.NoError(t, err)
		for id := barrier.CheckpointID(1); id <= 4; id++ {
			require.NoError(t, c.Restore(state.Metadata{ID: id, Kind: barrier.Checkpoint, Timestamp: int64(id)}, true))
		}
		m, ok := c.LatestCompleted()
		require.True(t, ok)
		require.Equal(t, barrier.CheckpointID(4), m.ID)
		gw := newGateway(c, true)
		attachRunning(t, c, gw)
		run := make(chan error, 1)
		go func() { run <- c.Run(t.Context()) }()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		trig := gw.triggers()
		require.Len(t, trig, 1)
		require.Equal(t, barrier.CheckpointID(5), trig[0].ID)
		// 1 went when 4 was restored, 2 when 5 completed: 3, 4, 5 remain.
		require.Equal(t, []barrier.CheckpointID{1, 2}, st.discarded)
		m, ok = c.LatestCompleted()
		require.True(t, ok)
		require.Equal(t, barrier.CheckpointID(5), m.ID)
		require.NoError(t, c.Close())
		require.NoError(t, <-run)
	})
}
