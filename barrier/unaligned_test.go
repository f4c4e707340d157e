package barrier

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The recorder of handler_test.go is also an UnalignedController.

func (r *recorder) PersistChannel(ch ChannelIndex, id CheckpointID) {
	r.calls = append(r.calls, fmt.Sprintf("persist %d for %d", ch, id))
}
func (r *recorder) ChannelStateComplete(id CheckpointID) {
	r.calls = append(r.calls, fmt.Sprintf("complete %d", id))
}
func (r *recorder) PrioritizeBarrier(ch ChannelIndex, id CheckpointID) {
	r.calls = append(r.calls, fmt.Sprintf("prioritize %d on %d", id, ch))
}
func (r *recorder) SwitchToUnaligned(id CheckpointID) {
	r.calls = append(r.calls, fmt.Sprintf("switch %d", id))
}
func (r *recorder) ScheduleAlignmentTimer(id CheckpointID, deadline int64) {
	r.calls = append(r.calls, fmt.Sprintf("timer %d at %d", id, deadline))
}

var _ UnalignedController = (*recorder)(nil)

func bts(id CheckpointID, ts int64) Barrier { return Barrier{ID: id, Timestamp: ts} }

func TestNewWithConfig(t *testing.T) {
	var c recorder
	for _, tc := range []struct {
		cfg  Config
		want any
	}{
		{Config{}, &Aligner{}},
		{Config{Mode: AtLeastOnce}, &Tracker{}},
		{Config{Alignment: Unaligned}, &Unaligner{}},
		{Config{Alignment: AlignedWithTimeout}, &TimeoutAligner{}},
		{Config{Alignment: AlignedWithTimeout, AlignmentTimeout: time.Second}, &TimeoutAligner{}},
	} {
		h, err := NewWithConfig(tc.cfg, 2, &c)
		require.NoError(t, err, "%+v", tc.cfg)
		assert.IsType(t, tc.want, h, "%+v", tc.cfg)
	}

	// A Controller that is not an UnalignedController.
	var plain struct{ Controller }
	for _, tc := range []struct {
		cfg  Config
		n    int
		c    Controller
		want string
	}{
		{Config{Mode: Mode(3)}, 2, &c, "barrier: unknown mode Mode(3)"},
		{Config{Alignment: Alignment(9)}, 2, &c, "barrier: unknown alignment Alignment(9)"},
		{Config{Mode: AtLeastOnce, Alignment: Unaligned}, 2, &c, "barrier: alignment unaligned needs mode exactly-once"},
		{Config{Alignment: AlignedWithTimeout, AlignmentTimeout: -time.Millisecond}, 2, &c, "barrier: negative alignment timeout -1ms"},
		{Config{AlignmentTimeout: time.Second}, 2, &c, "barrier: an alignment timeout needs alignment aligned with timeout"},
		{Config{Alignment: Unaligned}, 0, &c, "barrier: 0 input channels, need at least 1"},
		{Config{Alignment: Unaligned}, 2, nil, "barrier: nil Controller"},
		{Config{Alignment: AlignedWithTimeout}, 2, plain, "barrier: alignment aligned with timeout needs an UnalignedController, got struct { barrier.Controller }"},
		{Config{}, 0, &c, "barrier: 0 input channels, need at least 1"},
	} {
		h, err := NewWithConfig(tc.cfg, tc.n, tc.c)
		assert.EqualError(t, err, tc.want)
		assert.Nil(t, h)
	}
}

func TestNewUnalignedPanics(t *testing.T) {
	var c recorder
	assert.PanicsWithValue(t, "barrier: NewUnaligned with 0 input channels, need at least 1", func() { NewUnaligned(0, &c) })
	assert.PanicsWithValue(t, "barrier: NewUnaligned with nil Controller", func() { NewUnaligned(1, nil) })
	assert.PanicsWithValue(t, "barrier: NewAlignedWithTimeout with nil Controller", func() { NewAlignedWithTimeout(1, 0, nil) })
	assert.PanicsWithValue(t, "barrier: NewAlignedWithTimeout with negative timeout -1s", func() { NewAlignedWithTimeout(1, -time.Second, &c) })
}

func TestUnalignedBadChannelPanics(t *testing.T) {
	var c recorder
	for name, h := range map[string]UnalignedHandler{
		"unaligned": NewUnaligned(2, &c),
		"timeout":   NewAlignedWithTimeout(2, time.Second, &c),
	} {
		t.Run(name, func(t *testing.T) {
			assert.PanicsWithValue(t, "barrier: barrier on channel 2, out of range [0,2)", func() { h.ProcessPriorityBarrier(2, b(1)) })
			assert.PanicsWithValue(t, "barrier: announcement on channel -1, out of range [0,2)", func() { h.ProcessAnnouncement(-1, b(1)) })
			h.ProcessEndOfPartition(1)
			assert.PanicsWithValue(t, "barrier: barrier on channel 1 after its end of partition", func() { h.ProcessBarrier(1, b(1)) })
			assert.PanicsWithValue(t, "barrier: announcement on channel 1 after its end of partition", func() { h.ProcessAnnouncement(1, b(1)) })
			assert.PanicsWithValue(t, "barrier: cancel marker on channel 1 after its end of partition", func() { h.ProcessCancel(1, 1) })
			assert.PanicsWithValue(t, "barrier: end of partition on channel 1 after its end of partition", func() { h.ProcessEndOfPartition(1) })
			assert.Empty(t, c.take())
		})
	}
}

// TestUnalignedCallOrder pins the exact Controller calls of an Unaligner.
func TestUnalignedCallOrder(t *testing.T) {
	var c recorder
	u := NewUnaligned(3, &c)

	first := Barrier{ID: 1, Timestamp: 77, Options: Options{Kind: Savepoint, Alignment: Unaligned}}
	u.ProcessPriorityBarrier(1, first)
	assert.Equal(t, []string{"trigger 1", "persist 0 for 1", "persist 1 for 1", "persist 2 for 1"}, c.take())
	assert.Equal(t, first, c.triggers[0])
	assert.False(t, u.Aligning())

	// A newer barrier: abort, then the new trigger; never a block.
	u.ProcessPriorityBarrier(1, b(2))
	assert.Equal(t, []string{"abort 1 (subsumed by a newer checkpoint)", "trigger 2", "persist 0 for 2", "persist 1 for 2", "persist 2 for 2"}, c.take())
	u.ProcessPriorityBarrier(0, b(2))
	u.ProcessPriorityBarrier(0, b(2)) // a repeat
	assert.Empty(t, c.take())
	u.ProcessEndOfPartition(2)
	assert.Equal(t, []string{"complete 2"}, c.take())

	// An in-band barrier is handled like a priority one; announcements
	// and ticks do nothing. The ended channel is no longer recorded.
	u.ProcessAnnouncement(0, b(3))
	u.Tick(1 << 40)
	assert.Empty(t, c.take())
	u.ProcessBarrier(0, b(3))
	assert.Equal(t, []string{"trigger 3", "persist 0 for 3", "persist 1 for 3"}, c.take())
	assert.Equal(t, Unaligned, c.triggers[2].Options.Alignment)

	// A cancel for a newer id aborts both.
	u.ProcessCancel(1, 4)
	assert.Equal(t, []string{"abort 3 (subsumed by a newer checkpoint)", "abort 4 (cancel marker received)"}, c.take())
	assert.Equal(t, CheckpointID(4), u.LatestCheckpoint())
}

func TestUnalignedAbort(t *testing.T) {
	var c recorder
	u := NewUnaligned(2, &c)
	u.ProcessPriorityBarrier(0, b(1))
	c.take()
	u.Abort(1)
	u.ProcessPriorityBarrier(1, b(1))
	assert.Empty(t, c.take(), "an aborted checkpoint neither completes nor is reported")

	u.ProcessPriorityBarrier(1, b(3))
	c.take()
	u.Abort(2) // older: no effect
	u.ProcessPriorityBarrier(0, b(3))
	assert.Equal(t, []string{"complete 3"}, c.take())

	u.Abort(5)
	u.ProcessPriorityBarrier(0, b(5))
	assert.Empty(t, c.take())
	assert.Equal(t, CheckpointID(5), u.LatestCheckpoint())
}

// TestTimeoutAlignerCallOrder pins the exact Controller calls of a
// TimeoutAligner through an alignment that times out.
func TestTimeoutAlignerCallOrder(t *testing.T) {
	var c recorder
	a := NewAlignedWithTimeout(4, 10*time.Millisecond, &c)

	first := Barrier{ID: 1, Timestamp: 100, Options: Options{Kind: Savepoint, Alignment: AlignedWithTimeout, AlignmentTimeout: time.Hour}}
	a.ProcessAnnouncement(0, first)
	assert.Equal(t, []string{"timer 1 at 110"}, c.take())
	assert.True(t, a.Aligning())
	a.ProcessBarrier(0, first)
	a.ProcessAnnouncement(2, first)
	a.ProcessAnnouncement(1, first)
	assert.Equal(t, []string{"block 0"}, c.take())

	a.Tick(109)
	assert.Empty(t, c.take())
	a.Tick(110)
	assert.Equal(t, []string{
		"switch 1", "trigger 1",
		"persist 1 for 1", "persist 2 for 1", "persist 3 for 1",
		"prioritize 1 on 2", "block 2",
		"prioritize 1 on 1", "block 1",
	}, c.take())
	want := first
	want.Options.Alignment, want.Options.AlignmentTimeout = Unaligned, 0
	assert.Equal(t, want, c.triggers[0])
	assert.False(t, a.Aligning())
	a.Tick(200) // already unaligned
	assert.Empty(t, c.take())

	// A later announcement overtakes at once; the last one completes and
	// resumes every channel.
	a.ProcessAnnouncement(3, first)
	assert.Equal(t, []string{"prioritize 1 on 3", "block 3", "complete 1", "resume"}, c.take())

	// An aligned completion passes the first barrier unchanged; the
	// channel that completes it is not blocked first.
	second := Barrier{ID: 2, Timestamp: 300, Options: Options{Alignment: AlignedWithTimeout}}
	for ch := range ChannelIndex(4) {
		a.ProcessAnnouncement(ch, second)
		a.ProcessBarrier(ch, second)
	}
	assert.Equal(t, []string{"timer 2 at 310", "block 0", "block 1", "block 2", "trigger 2", "resume"}, c.take())
	assert.Equal(t, second, c.triggers[1])
}

// TestTimeoutAlignerUnannounced covers a driver whose channel does not
// announce: an in-band barrier of a new checkpoint starts it.
func TestTimeoutAlignerUnannounced(t *testing.T) {
	var c recorder
	a := NewAlignedWithTimeout(2, 0, &c)
	a.ProcessBarrier(1, bts(4, 50))
	assert.Equal(t, []string{"timer 4 at 50", "block 1"}, c.take())
	a.ProcessBarrier(0, bts(5, 60))
	assert.Equal(t, []string{"abort 4 (subsumed by a newer checkpoint)", "resume", "timer 5 at 60", "block 0"}, c.take())

	// After a switch, a barrier taken in band counts and blocks, like an
	// overtaking one.
	a.Tick(60)
	assert.Equal(t, []string{"switch 5", "trigger 5", "persist 1 for 5"}, c.take())
	a.ProcessBarrier(1, bts(5, 60))
	assert.Equal(t, []string{"complete 5", "resume"}, c.take())
}

// TestTimeoutAlignerPriorityBarrier covers an upstream task that already
// switched and sends its barrier as a priority event.
func TestTimeoutAlignerPriorityBarrier(t *testing.T) {
	var c recorder
	a := NewAlignedWithTimeout(3, time.Hour, &c)
	a.ProcessAnnouncement(0, bts(1, 0))
	a.ProcessBarrier(0, bts(1, 0))
	a.ProcessAnnouncement(2, bts(1, 0))
	c.take()

	a.ProcessPriorityBarrier(1, Barrier{ID: 1, Options: Options{Alignment: Unaligned}})
	assert.Equal(t, []string{
		"switch 1", "trigger 1", "persist 1 for 1", "persist 2 for 1",
		"prioritize 1 on 2", "block 2", "complete 1", "resume",
	}, c.take())

	// A priority barrier of a new checkpoint starts and switches it at
	// once; its channel is not blocked.
	a.ProcessPriorityBarrier(2, bts(2, 500))
	assert.Equal(t, []string{"timer 2 at 3600500", "switch 2", "trigger 2", "persist 0 for 2", "persist 1 for 2", "persist 2 for 2"}, c.take())
	a.ProcessPriorityBarrier(2, bts(2, 500)) // a repeat
	a.ProcessEndOfPartition(1)
	a.ProcessAnnouncement(0, bts(2, 500))
	assert.Equal(t, []string{"prioritize 2 on 0", "block 0", "complete 2", "resume"}, c.take())
}

func TestTimeoutAlignerAbort(t *testing.T) {
	var c recorder
	a := NewAlignedWithTimeout(2, 0, &c)

	// Abort in the aligned phase resumes; the timer then does nothing.
	a.ProcessAnnouncement(0, bts(1, 10))
	a.ProcessBarrier(0, bts(1, 10))
	c.take()
	a.Abort(1)
	assert.Equal(t, []string{"resume"}, c.take())
	a.Tick(10)
	a.ProcessAnnouncement(1, bts(1, 10))
	a.ProcessBarrier(1, bts(1, 10))
	assert.Empty(t, c.take())

	// Abort in the unaligned phase: no ChannelStateComplete ever.
	a.ProcessAnnouncement(1, bts(2, 0))
	a.Tick(0)
	c.take()
	a.Abort(2)
	assert.Equal(t, []string{"resume"}, c.take())
	a.ProcessAnnouncement(0, bts(2, 0))
	a.ProcessEndOfPartition(0)
	assert.Empty(t, c.take())

	// Abort ahead of any barrier.
	a.Abort(7)
	a.ProcessAnnouncement(1, bts(7, 0))
	assert.Empty(t, c.take())
	assert.Equal(t, CheckpointID(7), a.LatestCheckpoint())
}

// TestTimeoutAlignerEndOfDeliveredChannel covers a task that let a
// blocked channel through to its end: the channel stops counting.
func TestTimeoutAlignerEndOfDeliveredChannel(t *testing.T) {
	var c recorder
	a := NewAlignedWithTimeout(3, time.Hour, &c)
	a.ProcessAnnouncement(0, b(1))
	a.ProcessBarrier(0, b(1))
	a.ProcessEndOfPartition(0)
	a.ProcessAnnouncement(1, b(1))
	a.ProcessBarrier(1, b(1))
	assert.Equal(t, []string{"timer 1 at 3600000", "block 0", "block 1"}, c.take())
	a.ProcessEndOfPartition(2)
	assert.Equal(t, []string{"trigger 1", "resume"}, c.take())
}

func TestAlignmentString(t *testing.T) {
	assert.Equal(t, "aligned", Aligned.String())
	assert.Equal(t, "unaligned", Unaligned.String())
	assert.Equal(t, "aligned with timeout", AlignedWithTimeout.String())
	assert.Equal(t, "Alignment(7)", Alignment(7).String())
}
