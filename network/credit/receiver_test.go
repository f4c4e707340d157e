package credit

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func newPool(t *testing.T, n int, exclusive ...int) (*Pool, []*Channel) {
	t.Helper()
	p, err := NewPool(n)
	require.NoError(t, err)
	var chs []*Channel
	for _, e := range exclusive {
		c, err := p.NewChannel(e)
		require.NoError(t, err)
		chs = append(chs, c)
	}
	return p, chs
}

func credited(p *Pool) map[int]int {
	m := map[int]int{}
	for _, c := range p.Credited(nil) {
		if n := c.TakeUnannouncedCredit(); n > 0 {
			m[c.Index()] = n
		}
	}
	return m
}

func TestConfigErrors(t *testing.T) {
	_, err := NewPool(-1)
	require.Error(t, err)
	p, _ := newPool(t, 0)
	_, err = p.NewChannel(-1)
	require.Error(t, err)
}

func TestSequence(t *testing.T) {
	_, chs := newPool(t, 0, 2)
	c := chs[0]
	require.NoError(t, c.Receive(0))
	require.NoError(t, c.Receive(1))
	err := c.Receive(3)
	var se *SequenceError
	require.ErrorAs(t, err, &se)
	require.Equal(t, SequenceError{Expected: 2, Got: 3}, *se)
	require.Contains(t, err.Error(), "sequence 3, expected 2")
	require.ErrorAs(t, c.Receive(1), &se, "reorder")
	require.NoError(t, c.Receive(2))
}

func TestInitialCreditAndTake(t *testing.T) {
	p, chs := newPool(t, 4, 2)
	c := chs[0]
	require.Equal(t, uint32(2), c.InitialCredit())
	require.Equal(t, 2, c.Available())
	src, err := c.Take()
	require.NoError(t, err)
	require.Equal(t, Exclusive, src)
	_, err = c.Take()
	require.NoError(t, err)
	_, err = c.Take()
	require.ErrorIs(t, err, ErrNoCredit, "third buffer with 2 credits")
	require.Equal(t, 4, p.Available())
}

func TestTakeNeedsAnnouncedCredit(t *testing.T) {
	p, chs := newPool(t, 0, 1)
	c := chs[0]
	src, err := c.Take()
	require.NoError(t, err)
	c.Recycle(src)
	require.Equal(t, 1, c.Unannounced())
	_, err = c.Take()
	require.ErrorIs(t, err, ErrNoCredit, "credit not yet announced")
	require.Equal(t, map[int]int{0: 1}, credited(p))
	_, err = c.Take()
	require.NoError(t, err)
}

func TestBacklogRequestsFloating(t *testing.T) {
	p, chs := newPool(t, 3, 2, 2)
	a, b := chs[0], chs[1]
	a.OnBacklog(2) // wants 4 free, has 2
	require.Equal(t, 4, a.Required())
	require.Equal(t, 2, a.Floating())
	require.Equal(t, 1, p.Available())
	b.OnBacklog(3) // wants 5, has 2, pool has 1
	require.Equal(t, 1, b.Floating())
	require.True(t, b.Waiting())
	require.Equal(t, 1, p.Waiting())
	require.Equal(t, map[int]int{0: 2, 1: 1}, credited(p))
	require.Empty(t, credited(p), "taken")

	// a receives a buffer: floating first.
	src, err := a.Take()
	require.NoError(t, err)
	require.Equal(t, Floating, src)
	a.OnBacklog(1) // still wants 3 free and has 3
	// Recycling the floating buffer serves the waiting channel b.
	a.Recycle(src)
	require.Equal(t, 2, b.Floating())
	require.True(t, b.Waiting(), "still wants one more")
	require.Equal(t, map[int]int{1: 1}, credited(p))
	require.Equal(t, 0, p.Available())

	// b's backlog drops: when served next it declines, and the buffer
	// stays in the pool.
	b.OnBacklog(0)
	src, err = a.Take()
	require.NoError(t, err)
	a.Recycle(src)
	require.Equal(t, 0, p.Waiting())
	require.Equal(t, 1, p.Available())
	require.Equal(t, 2, b.Floating())
}

func TestExclusiveRecycleReleasesSurplusFloating(t *testing.T) {
	p, chs := newPool(t, 2, 2)
	c := chs[0]
	// Hold both exclusive buffers, then get 2 floating for a backlog of 0
	// (required 2).
	e1, _ := c.Take()
	e2, _ := c.Take()
	require.Equal(t, Exclusive, e1)
	c.OnBacklog(0)
	require.Equal(t, 2, c.Floating())
	require.Equal(t, map[int]int{0: 2}, credited(p))
	// Freed exclusive: 3 free > 2 required, so a free floating goes back,
	// and no credit is added.
	c.Recycle(e1)
	require.Equal(t, 1, c.Floating())
	require.Equal(t, 1, p.Available())
	require.Equal(t, 0, c.Unannounced())
	c.Recycle(e2)
	require.Equal(t, 0, c.Floating())
	require.Equal(t, 2, p.Available())
	require.Equal(t, 2, c.Available())
	require.Empty(t, credited(p))
	// Exclusive recycled while required: becomes credit.
	e, _ := c.Take()
	c.OnBacklog(5) // wants 7, gets the two floating and waits
	require.True(t, c.Waiting())
	c.Recycle(e)
	require.Equal(t, map[int]int{0: 3}, credited(p))
}

func TestZeroExclusive(t *testing.T) {
	p, chs := newPool(t, 1, 0, 0)
	a, b := chs[0], chs[1]
	require.Equal(t, uint32(0), a.InitialCredit())
	_, err := a.Take()
	require.ErrorIs(t, err, ErrNoCredit)
	a.OnBacklog(1)
	b.OnBacklog(1)
	require.True(t, b.Waiting())
	require.Equal(t, map[int]int{0: 1}, credited(p))
	src, err := a.Take()
	require.NoError(t, err)
	require.Equal(t, Floating, src)
	a.OnBacklog(0)
	a.Recycle(src)
	require.Equal(t, map[int]int{1: 1}, credited(p))
	require.False(t, b.Waiting())
}

func TestRecycleInvariants(t *testing.T) {
	_, chs := newPool(t, 1, 1)
	c := chs[0]
	require.Panics(t, func() { c.Recycle(Exclusive) })
	require.Panics(t, func() { c.Recycle(Floating) })
	require.Panics(t, func() { c.Recycle(0) })
	src, _ := c.Take()
	c.Recycle(src)
	require.Panics(t, func() { c.Recycle(src) }, "twice")
}

func TestRelease(t *testing.T) {
	p, chs := newPool(t, 3, 1, 1)
	a, b := chs[0], chs[1]
	a.OnBacklog(2) // 2 floating
	f, _ := a.Take()
	require.Equal(t, Floating, f)
	b.OnBacklog(3) // 1 floating, waits
	require.True(t, b.Waiting())
	credited(p)
	a.Release()
	a.Release()
	// a's free floating went to the waiting b.
	require.Equal(t, 2, b.Floating())
	require.Panics(t, func() { a.Take() })
	require.Panics(t, func() { _ = a.Receive(0) })
	a.Recycle(f) // held floating returns after release
	require.Equal(t, 3, b.Floating())
	require.Equal(t, map[int]int{1: 2}, credited(p))
	b.Release()
	require.Equal(t, 3, p.Available())
	require.Equal(t, 0, p.Waiting())
}

// A channel that waits for the pool's one floating buffer, uses it, gives
// it back and queues again, buffer after buffer, costs no allocation.
func TestWaitingQueueNoAllocs(t *testing.T) {
	p, chs := newPool(t, 1, 0)
	c := chs[0]
	c.OnBacklog(10) // takes the floating buffer and queues for more
	require.True(t, c.Waiting())
	var seq uint32
	dst := make([]*Channel, 0, 1)
	cycle := func() {
		for _, ch := range p.Credited(dst[:0]) {
			ch.TakeUnannouncedCredit()
		}
		if err := c.Receive(seq); err != nil {
			t.Fatal(err)
		}
		seq++
		src, err := c.Take()
		if err != nil {
			t.Fatal(err)
		}
		c.Recycle(src) // back to the pool, which hands it to c again
	}
	cycle()
	if n := testing.AllocsPerRun(100, cycle); n != 0 {
		t.Errorf("%v allocations per buffer, want 0", n)
	}
	require.True(t, c.Waiting())
	require.Equal(t, 1, p.Waiting())
}
