package barrier

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is a Controller that writes down every call.
type recorder struct {
	calls    []string
	triggers []Barrier
}

func (r *recorder) BlockChannel(ch ChannelIndex) {
	r.calls = append(r.calls, fmt.Sprintf("block %d", ch))
}
func (r *recorder) ResumeAllChannels() { r.calls = append(r.calls, "resume") }
func (r *recorder) TriggerCheckpoint(b Barrier) {
	r.calls = append(r.calls, fmt.Sprintf("trigger %d", b.ID))
	r.triggers = append(r.triggers, b)
}
func (r *recorder) AbortCheckpoint(id CheckpointID, reason AbortReason) {
	r.calls = append(r.calls, fmt.Sprintf("abort %d (%s)", id, reason))
}

// take returns the calls since the last take.
func (r *recorder) take() []string {
	c := r.calls
	r.calls = nil
	return c
}

func b(id CheckpointID) Barrier { return Barrier{ID: id} }

func TestNew(t *testing.T) {
	var c recorder
	h, err := New(ExactlyOnce, 3, &c)
	require.NoError(t, err)
	assert.IsType(t, &Aligner{}, h)
	h, err = New(AtLeastOnce, 1, &c)
	require.NoError(t, err)
	assert.IsType(t, &Tracker{}, h)

	for _, tc := range []struct {
		mode Mode
		n    int
		c    Controller
		want string
	}{
		{ExactlyOnce, 0, &c, "barrier: 0 input channels, need at least 1"},
		{AtLeastOnce, -2, &c, "barrier: -2 input channels, need at least 1"},
		{ExactlyOnce, 2, nil, "barrier: nil Controller"},
		{Mode(7), 2, &c, "barrier: unknown mode Mode(7)"},
	} {
		h, err := New(tc.mode, tc.n, tc.c)
		assert.EqualError(t, err, tc.want)
		assert.Nil(t, h)
	}
}

func TestConstructorsPanic(t *testing.T) {
	var c recorder
	assert.PanicsWithValue(t, "barrier: NewAligned with 0 input channels, need at least 1", func() { NewAligned(0, &c) })
	assert.PanicsWithValue(t, "barrier: NewTracker with -1 input channels, need at least 1", func() { NewTracker(-1, &c) })
	assert.PanicsWithValue(t, "barrier: NewAligned with nil Controller", func() { NewAligned(1, nil) })
	assert.PanicsWithValue(t, "barrier: NewTracker with nil Controller", func() { NewTracker(1, nil) })
}

func TestBadChannelPanics(t *testing.T) {
	for _, mode := range []Mode{ExactlyOnce, AtLeastOnce} {
		t.Run(mode.String(), func(t *testing.T) {
			var c recorder
			h, err := New(mode, 2, &c)
			require.NoError(t, err)
			assert.PanicsWithValue(t, "barrier: barrier on channel 2, out of range [0,2)", func() { h.ProcessBarrier(2, b(1)) })
			assert.PanicsWithValue(t, "barrier: cancel marker on channel -1, out of range [0,2)", func() { h.ProcessCancel(-1, 1) })
			assert.PanicsWithValue(t, "barrier: end of partition on channel 5, out of range [0,2)", func() { h.ProcessEndOfPartition(5) })
			h.ProcessEndOfPartition(1)
			assert.PanicsWithValue(t, "barrier: barrier on channel 1 after its end of partition", func() { h.ProcessBarrier(1, b(1)) })
			assert.PanicsWithValue(t, "barrier: cancel marker on channel 1 after its end of partition", func() { h.ProcessCancel(1, 1) })
			assert.PanicsWithValue(t, "barrier: end of partition on channel 1 after its end of partition", func() { h.ProcessEndOfPartition(1) })
			assert.Empty(t, c.calls)
		})
	}
}

func TestAbortReasonString(t *testing.T) {
	assert.Equal(t, "subsumed by a newer checkpoint", AbortSubsumed.String())
	assert.Equal(t, "cancel marker received", AbortCancelMarker.String())
	assert.Equal(t, "AbortReason(0)", AbortReason(0).String())
}

// TestAlignedCallOrder pins the exact Controller calls, beyond what the
// scenario harness can see.
func TestAlignedCallOrder(t *testing.T) {
	var c recorder
	a := NewAligned(3, &c)

	a.ProcessBarrier(0, b(1))
	assert.Equal(t, []string{"block 0"}, c.take())
	assert.True(t, a.Aligning())

	// A newer barrier: abort, resume, then block for the new alignment.
	a.ProcessBarrier(1, b(2))
	assert.Equal(t, []string{"abort 1 (subsumed by a newer checkpoint)", "resume", "block 1"}, c.take())

	// The last barrier triggers without blocking its channel first.
	a.ProcessBarrier(0, b(2))
	a.ProcessBarrier(2, b(2))
	assert.Equal(t, []string{"block 0", "trigger 2", "resume"}, c.take())
	assert.False(t, a.Aligning())
	assert.Equal(t, CheckpointID(2), a.LatestCheckpoint())

	// A cancel for a newer id while aligning aborts both, then resumes.
	a.ProcessBarrier(2, b(3))
	a.ProcessCancel(0, 4)
	assert.Equal(t, []string{"block 2", "abort 3 (subsumed by a newer checkpoint)", "abort 4 (cancel marker received)", "resume"}, c.take())

	// A cancel with nothing blocked does not resume.
	a.ProcessCancel(0, 5)
	assert.Equal(t, []string{"abort 5 (cancel marker received)"}, c.take())
	a.ProcessCancel(1, 5)
	a.ProcessBarrier(1, b(5))
	a.ProcessBarrier(1, b(4))
	assert.Empty(t, c.take())
}

func TestAlignedSingleChannelNeverBlocks(t *testing.T) {
	var c recorder
	a := NewAligned(1, &c)
	for id := CheckpointID(1); id <= 3; id++ {
		a.ProcessBarrier(0, b(id))
	}
	assert.Equal(t, []string{"trigger 1", "trigger 2", "trigger 3"}, c.take())
}

// TestTriggerCarriesBarrier checks that the barrier handed to
// TriggerCheckpoint is the checkpoint's own, with its timestamp and
// options, also when an end of partition completes it.
func TestTriggerCarriesBarrier(t *testing.T) {
	first := Barrier{ID: 7, Timestamp: 1234, Options: Options{Kind: Savepoint, Alignment: AlignedWithTimeout, AlignmentTimeout: time.Second}}
	for _, mode := range []Mode{ExactlyOnce, AtLeastOnce} {
		t.Run(mode.String(), func(t *testing.T) {
			var c recorder
			h, err := New(mode, 3, &c)
			require.NoError(t, err)
			h.ProcessBarrier(0, first)
			h.ProcessBarrier(1, first)
			h.ProcessEndOfPartition(2)
			require.Len(t, c.triggers, 1)
			assert.Equal(t, first, c.triggers[0])
		})
	}
}

func TestAlignedAbort(t *testing.T) {
	var c recorder
	a := NewAligned(2, &c)

	// Abort of the checkpoint being aligned: resume, no callback.
	a.ProcessBarrier(0, b(1))
	c.take()
	a.Abort(1)
	assert.Equal(t, []string{"resume"}, c.take())
	assert.False(t, a.Aligning())
	a.ProcessBarrier(1, b(1)) // its late barrier is ignored
	assert.Empty(t, c.take())

	// Abort of an older checkpoint leaves a newer alignment alone.
	a.ProcessBarrier(1, b(3))
	c.take()
	a.Abort(2)
	assert.Empty(t, c.take())
	assert.True(t, a.Aligning())
	// ... and an abort of a newer one ends it.
	a.Abort(4)
	assert.Equal(t, []string{"resume"}, c.take())
	assert.Equal(t, CheckpointID(4), a.LatestCheckpoint())

	// Abort ahead of any barrier: that checkpoint's barriers are ignored.
	a.Abort(6)
	a.ProcessBarrier(0, b(5))
	a.ProcessBarrier(0, b(6))
	a.ProcessCancel(0, 6)
	assert.Empty(t, c.take())
	a.ProcessBarrier(0, b(7))
	a.ProcessBarrier(1, b(7))
	assert.Equal(t, []string{"block 0", "trigger 7", "resume"}, c.take())
}

func TestTrackerAbort(t *testing.T) {
	var c recorder
	tr := NewTracker(2, &c)
	tr.ProcessBarrier(0, b(1))
	tr.ProcessBarrier(0, b(2))
	tr.ProcessBarrier(0, b(3))
	tr.Abort(2)
	tr.ProcessBarrier(1, b(1))
	tr.ProcessBarrier(1, b(2))
	assert.Empty(t, c.take())
	tr.ProcessBarrier(1, b(3))
	assert.Equal(t, []string{"trigger 3"}, c.take())

	// Abort ahead of any barrier.
	tr.Abort(5)
	assert.Equal(t, CheckpointID(5), tr.LatestCheckpoint())
	tr.ProcessBarrier(0, b(5))
	tr.ProcessBarrier(1, b(5))
	assert.Empty(t, c.take())
	assert.False(t, tr.Aligning())
}

// TestTrackerReusesEntries checks that a long run keeps the bookkeeping
// bounded: at most MaxTrackedCheckpoints+1 entries ever exist.
func TestTrackerReusesEntries(t *testing.T) {
	var c recorder
	tr := NewTracker(130, &c) // more than one word of channel bits
	for id := CheckpointID(1); id <= 1000; id++ {
		tr.ProcessBarrier(ChannelIndex(id%130), b(id))
		if id%7 == 0 {
			tr.ProcessCancel(129, id-3)
		}
	}
	assert.LessOrEqual(t, len(tr.pending)+len(tr.free), MaxTrackedCheckpoints+1)
	c.take()
	for ch := range 130 { // a repeat from channel 90 does not count twice
		tr.ProcessBarrier(ChannelIndex(ch), b(1000))
	}
	assert.Equal(t, []string{"trigger 1000"}, c.take())
	assert.Empty(t, tr.pending)
}
