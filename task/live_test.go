package task

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/network"
)

// waitSource has nothing to emit until release is closed, then ends.
type waitSource struct{ release chan struct{} }

func (s *waitSource) PollNext() (SourceStatus, error) {
	select {
	case <-s.release:
		return EndOfInput, nil
	default:
		return NothingAvailable, nil
	}
}

func (s *waitSource) Available() <-chan struct{} { return s.release }

// eventually polls cond until it holds, for at most a minute.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func runTask(t *testing.T, tk *Task) (wait func() error) {
	var wg sync.WaitGroup
	var err error
	wg.Go(func() { err = tk.Run(context.Background()) })
	return func() error { wg.Wait(); return err }
}

func requireAddsUp(t *testing.T, m LiveMetrics) {
	t.Helper()
	require.Equal(t, m.Elapsed, m.Busy+m.Idle+m.BackPressured, "%+v", m)
}

// A task waiting for input reports the wait while it lasts, without
// publishing anything new.
func TestLiveMetricsOfWaitingTask(t *testing.T) {
	src := &waitSource{release: make(chan struct{})}
	tk, err := New(Config{Name: "src", Source: src})
	require.NoError(t, err)
	m := tk.LiveMetrics()
	require.Equal(t, Created, m.State)
	require.Zero(t, m.Elapsed)
	require.Equal(t, eventtime.MinWatermark, m.OutputWatermark)

	wait := runTask(t, tk)
	eventually(t, "running", func() bool { return tk.LiveMetrics().State == Running })
	first := tk.LiveMetrics()
	requireAddsUp(t, first)
	eventually(t, "idle time grows while the task waits", func() bool {
		m := tk.LiveMetrics()
		requireAddsUp(t, m)
		return m.Idle > first.Idle && m.Elapsed > first.Elapsed
	})
	close(src.release)
	require.NoError(t, wait())
	final := tk.LiveMetrics()
	require.Equal(t, Finished, final.State)
	requireAddsUp(t, final)
	require.Equal(t, tk.Metrics().Idle, final.Idle)
	require.Equal(t, tk.Metrics().Busy, final.Busy)
	require.Equal(t, final, tk.LiveMetrics(), "nothing moves once the task ended")
}

// burstSource writes records straight into its output partition, many
// per poll, so that the task blocks inside a write once the partition's
// pool is empty: nobody reads it.
type burstSource struct {
	p       *network.ResultPartition
	written int
	rec     []byte
}

func (s *burstSource) PollNext() (SourceStatus, error) {
	for range 16 {
		if err := s.p.Write(0, s.rec); err != nil {
			return EndOfInput, err
		}
		s.written++
	}
	return MoreAvailable, nil
}

func (s *burstSource) Available() <-chan struct{} { return nil }

// A task blocked in a write for want of an output buffer reports back
// pressure while it lasts, and a full output pool.
func TestLiveMetricsOfTaskBlockedInWrite(t *testing.T) {
	g, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: 4096, NumSegments: 8})
	require.NoError(t, err)
	lp, err := g.NewLocalPool(2, 2)
	require.NoError(t, err)
	p, err := network.NewResultPartition(uuid.New(), "out", 1, lp)
	require.NoError(t, err)
	src := &burstSource{p: p, rec: make([]byte, 1000)}
	tk, err := New(Config{Name: "src", Source: src, Outputs: []*network.ResultPartition{p}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = tk.Run(ctx) })

	eventually(t, "blocked in a write", func() bool { return p.BackPressuredFor() > 0 })
	first := tk.LiveMetrics()
	requireAddsUp(t, first)
	require.Equal(t, 2, first.Output.Capacity)
	require.Equal(t, 2, first.Output.InUse)
	require.Equal(t, 2, first.Output.Queued) // both full, waiting for a third
	eventually(t, "back-pressured time grows", func() bool {
		m := tk.LiveMetrics()
		requireAddsUp(t, m)
		return m.BackPressured > first.BackPressured && m.Elapsed > first.Elapsed
	})
	cancel()
	wg.Wait()
	g2 := tk.LiveMetrics()
	require.Equal(t, Canceled, g2.State)
	require.Positive(t, g2.BackPressured)
}
