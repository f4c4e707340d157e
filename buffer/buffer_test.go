package buffer

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newPool(t *testing.T, segs, min, max int) (*GlobalPool, *LocalPool) {
	t.Helper()
	g, err := NewGlobalPool(Config{SegmentSize: 128, NumSegments: segs})
	require.NoError(t, err)
	p, err := g.NewLocalPool(min, max)
	require.NoError(t, err)
	return g, p
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, Config{}.Validate())
	require.Error(t, Config{SegmentSize: 8}.Validate())
	require.Error(t, Config{NumSegments: -1}.Validate())
	_, err := NewGlobalPool(Config{SegmentSize: -5})
	require.Error(t, err)
}

func TestRequestReleaseRecycles(t *testing.T) {
	g, p := newPool(t, 4, 2, 3)
	var bufs []*Buffer
	for i := 0; i < 3; i++ {
		b, err := p.Request()
		require.NoError(t, err)
		require.NotNil(t, b, "request %d", i)
		require.Equal(t, 128, b.Cap())
		bufs = append(bufs, b)
	}
	b, err := p.Request()
	require.NoError(t, err)
	require.Nil(t, b, "max is 3")
	require.Equal(t, 3, p.Outstanding())
	for _, b := range bufs {
		b.Release()
	}
	require.Equal(t, 0, p.Outstanding())
	p.Close()
	require.Equal(t, 0, g.InUse())
}

func TestReservationRespected(t *testing.T) {
	g, err := NewGlobalPool(Config{SegmentSize: 128, NumSegments: 4})
	require.NoError(t, err)
	a, err := g.NewLocalPool(3, 4)
	require.NoError(t, err)
	_, err = g.NewLocalPool(2, 2)
	require.ErrorIs(t, err, ErrInsufficient)
	b, err := g.NewLocalPool(1, 4)
	require.NoError(t, err)
	// b may take its one reserved segment plus nothing of a's reservation.
	x, _ := b.Request()
	require.NotNil(t, x)
	y, _ := b.Request()
	require.Nil(t, y, "the other three are reserved for a")
	var held []*Buffer
	for i := 0; i < 3; i++ {
		z, _ := a.Request()
		require.NotNil(t, z)
		held = append(held, z)
	}
	x.Release()
	for _, z := range held {
		z.Release()
	}
	a.Close()
	b.Close()
	require.Equal(t, 0, g.InUse())
}

func TestSliceSharesRefcount(t *testing.T) {
	g, p := newPool(t, 2, 1, 1)
	b, _ := p.Request()
	copy(b.Segment(), "hello world")
	b.SetLen(11)
	s1 := b.Slice(0, 5, Data)
	s2 := b.Slice(6, 5, Data)
	s3 := s2.Slice(1, 3, Data)
	require.Equal(t, "hello", string(s1.Bytes()))
	require.Equal(t, "world", string(s2.Bytes()))
	require.Equal(t, "orl", string(s3.Bytes()))
	require.EqualValues(t, 4, b.Refs())
	b.Release()
	s1.Release()
	s3.Release()
	require.Equal(t, 1, p.Outstanding())
	s2.Release()
	require.Equal(t, 0, p.Outstanding())
	p.Close()
	require.Equal(t, 0, g.InUse())
}

func TestDoubleReleasePanics(t *testing.T) {
	_, p := newPool(t, 2, 1, 1)
	defer p.Close()
	b, _ := p.Request()
	b.Release()
	require.Panics(t, func() { b.Release() })
	w := Wrap([]byte("x"), Event)
	w.Release()
	require.Panics(t, func() { w.Bytes() })
	require.Panics(t, func() { w.Retain() })
}

func TestBlockingRequestWakesOnRecycle(t *testing.T) {
	_, p := newPool(t, 1, 1, 1)
	defer p.Close()
	b, _ := p.Request()
	var wg sync.WaitGroup
	wg.Add(1)
	var got *Buffer
	go func() {
		defer wg.Done()
		var err error
		got, err = p.RequestBlocking(context.Background())
		require.NoError(t, err)
	}()
	b.Release()
	wg.Wait()
	require.NotNil(t, got)
	got.Release()
}

func TestBlockingRequestCancelledAndClosed(t *testing.T) {
	_, p := newPool(t, 1, 1, 1)
	b, _ := p.Request()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.RequestBlocking(ctx)
	require.ErrorIs(t, err, context.Canceled)

	done := make(chan error)
	go func() {
		_, err := p.RequestBlocking(context.Background())
		done <- err
	}()
	p.Close()
	require.ErrorIs(t, <-done, ErrClosed)
	b.Release() // after close, goes straight back to the global pool
}

func TestLocalPoolBorrowsBeyondMinWaitsOnGlobal(t *testing.T) {
	g, err := NewGlobalPool(Config{SegmentSize: 128, NumSegments: 2})
	require.NoError(t, err)
	a, _ := g.NewLocalPool(0, 2)
	b, _ := g.NewLocalPool(0, 2)
	x, _ := a.Request()
	y, _ := a.Request()
	require.NotNil(t, y)
	z, _ := b.Request()
	require.Nil(t, z)
	done := make(chan *Buffer)
	go func() {
		v, err := b.RequestBlocking(context.Background())
		require.NoError(t, err)
		done <- v
	}()
	x.Release() // back to a, not the global pool
	a.Close()   // a's free segment returns to the global pool: b wakes
	v := <-done
	v.Release()
	y.Release()
	b.Close()
	require.Equal(t, 0, g.InUse())
}

func TestRequestAllocFree(t *testing.T) {
	_, p := newPool(t, 2, 2, 2)
	defer p.Close()
	allocs := testing.AllocsPerRun(1000, func() {
		b, _ := p.Request()
		b.Release()
	})
	require.Zero(t, allocs)
}

// TestLocalPoolReusesOldestFirst checks the free list against a FIFO
// reference over a random sequence of requests and releases.
func TestLocalPoolReusesOldestFirst(t *testing.T) {
	g, p := newPool(t, 8, 2, 5)
	rng := rand.New(rand.NewPCG(1, 2))
	var held []*Buffer // in request order
	var want []*Buffer // reference FIFO of released buffers
	seen := map[*Buffer]bool{}
	for step := 0; step < 5000; step++ {
		if len(held) > 0 && (rng.IntN(2) == 0 || len(held) == 5) {
			i := rng.IntN(len(held))
			b := held[i]
			held = append(held[:i], held[i+1:]...)
			b.Release()
			want = append(want, b)
			continue
		}
		b, err := p.Request()
		require.NoError(t, err)
		require.NotNil(t, b)
		if len(want) > 0 {
			require.Same(t, want[0], b, "step %d", step)
			want = want[1:]
		} else {
			require.False(t, seen[b], "step %d: a new segment was expected", step)
		}
		seen[b] = true
		held = append(held, b)
	}
	for _, b := range held {
		b.Release()
	}
	require.Equal(t, 0, p.Outstanding())
	p.Close()
	require.Equal(t, 0, g.InUse())
}

// Overdraft buffers come beyond the pool's maximum, only when it has no
// free buffer, at most the overdraft, never from reserved segments, and
// go back to the global pool when released.
func TestOverdraft(t *testing.T) {
	g, err := NewGlobalPool(Config{SegmentSize: 128, NumSegments: 6})
	require.NoError(t, err)
	p, err := g.NewLocalPool(1, 2)
	require.NoError(t, err)
	other, err := g.NewLocalPool(2, 2) // reserves 2 of the 6
	require.NoError(t, err)
	p.SetOverdraft(3)
	b, err := p.RequestOverdraft()
	require.NoError(t, err)
	require.Nil(t, b, "below its maximum the pool needs no overdraft")
	var held []*Buffer
	for range 2 {
		b, err := p.Request()
		require.NoError(t, err)
		held = append(held, b)
	}
	for range 2 {
		b, err := p.RequestOverdraft()
		require.NoError(t, err)
		require.NotNil(t, b)
		held = append(held, b)
	}
	b, err = p.RequestOverdraft()
	require.NoError(t, err)
	require.Nil(t, b, "the other pool's reservation is untouched")
	require.Equal(t, 4, g.InUse())
	require.NotNil(t, p.Available(), "no buffer without overdraft")
	held[0].Release()
	require.NotNil(t, p.Available(), "still above its maximum")
	held[1].Release()
	require.NotNil(t, p.Available(), "the overdraft buffers count against the maximum")
	require.Equal(t, 2, g.InUse())
	held[2].Release()
	require.Nil(t, p.Available())
	held[3].Release()
	p.Close()
	other.Close()
	require.Zero(t, g.InUse())
}

// A waiter for k recycled buffers is woken by the k-th recycled since its
// count, not before, overdraft buffers (which go on to the global pool)
// included; a closed pool wakes it whatever k.
func TestWakeAfterRecycled(t *testing.T) {
	g, err := NewGlobalPool(Config{SegmentSize: 64, NumSegments: 16})
	require.NoError(t, err)
	p, err := g.NewLocalPool(4, 4)
	require.NoError(t, err)
	p.SetOverdraft(1)
	var held []*Buffer
	for range 4 {
		b, err := p.Request()
		require.NoError(t, err)
		held = append(held, b)
	}
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	since := p.Recycled()
	ch := p.AvailableAfter(since, 3)
	require.NotNil(t, ch)
	held[0].Release()
	held[1].Release()
	require.False(t, closed(ch), "woken by 2 of 3 buffers")
	held[2].Release()
	require.True(t, closed(ch), "not woken by the third buffer")
	held = held[3:]
	for range 3 {
		b, err := p.Request()
		require.NoError(t, err)
		held = append(held, b)
	}

	// An overdraft buffer counts: its recycling leaves the pool below its
	// maximum.
	od, err := p.RequestOverdraft()
	require.NoError(t, err)
	require.NotNil(t, od)
	since = p.Recycled()
	ch = p.AvailableAfter(since, 2)
	od.Release()
	require.False(t, closed(ch))
	held[0].Release()
	require.True(t, closed(ch), "not woken by 2 buffers, one an overdraft one")

	// Buffers recycled between the count and the wait count too; if k of
	// them were, the wait is for the next one.
	b, err := p.Request()
	require.NoError(t, err)
	held[0] = b
	since = p.Recycled()
	held[1].Release()
	b, err = p.Request()
	require.NoError(t, err)
	held[1] = b
	ch = p.AvailableAfter(since, 1)
	require.NotNil(t, ch)
	require.False(t, closed(ch))

	// RequestBlockingAfter returns once k were recycled, and Close wakes it.
	got := make(chan error, 1)
	since = p.Recycled()
	go func() {
		b, err := p.RequestBlockingAfter(context.Background(), since, 4)
		if b != nil {
			b.Release()
		}
		got <- err
	}()
	for _, b := range held {
		b.Release()
	}
	require.NoError(t, <-got)
	held = held[:0]
	for range 4 {
		b, err := p.Request()
		require.NoError(t, err)
		held = append(held, b)
	}
	go func() {
		_, err := p.RequestBlockingAfter(context.Background(), p.Recycled(), 4)
		got <- err
	}()
	p.Close()
	require.ErrorIs(t, <-got, ErrClosed)
	for _, b := range held {
		b.Release()
	}
	require.Zero(t, g.InUse())
}
