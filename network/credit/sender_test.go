package credit

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func newSender(t *testing.T, credit uint32) *Sender {
	t.Helper()
	s, err := NewSender(credit)
	require.NoError(t, err)
	return s
}

func TestSenderCredit(t *testing.T) {
	_, err := NewSender(MaxCredit + 1)
	require.ErrorIs(t, err, ErrCreditOverflow)

	s := newSender(t, 2)
	require.True(t, s.CanSend(true))
	require.Equal(t, uint32(0), s.Sent(Data, 1))
	require.Equal(t, uint32(1), s.Sent(Event, 1))
	require.Equal(t, 1, s.Credit())
	require.Panics(t, func() { s.Sent(Data, 2) }) // partial of 2 with credit 1
	require.Equal(t, uint32(2), s.Sent(Data, 1))
	require.Equal(t, 0, s.Credit())
	require.False(t, s.CanSend(true))
	require.True(t, s.CanSend(false), "events need no credit")
	require.Equal(t, uint32(3), s.Sent(PrioritizedEvent, 1))
	require.Panics(t, func() { s.Sent(Data, 1) })

	require.ErrorIs(t, s.AddCredit(0), ErrZeroCredit)
	require.NoError(t, s.AddCredit(3))
	require.Equal(t, uint32(4), s.Sent(Data, 3), "a partial response takes consecutive numbers")
	require.Equal(t, uint32(7), s.NextSequence())
	require.Equal(t, 0, s.Credit())

	require.NoError(t, s.AddCredit(MaxCredit))
	require.ErrorIs(t, s.AddCredit(1), ErrCreditOverflow)
	require.Equal(t, MaxCredit, s.Credit(), "failed AddCredit changes nothing")

	s2 := newSender(t, MaxCredit)
	require.ErrorIs(t, s2.AddCredit(1<<32-1), ErrCreditOverflow)
}

func TestSenderSentPanics(t *testing.T) {
	for name, f := range map[string]func(s *Sender){
		"zero buffers":    func(s *Sender) { s.Sent(Data, 0) },
		"event partial":   func(s *Sender) { s.Sent(Event, 2) },
		"unknown type":    func(s *Sender) { s.Sent(5, 1) },
		"over credit":     func(s *Sender) { s.Sent(Data, 11) },
		"while blocked":   func(s *Sender) { s.Sent(AlignedBarrier, 1); s.Sent(Event, 1) },
		"blocked partial": func(s *Sender) { s.Sent(TimeoutableAlignedBarrier, 1); s.Sent(Data, 1) },
	} {
		t.Run(name, func(t *testing.T) {
			require.Panics(t, func() { f(newSender(t, 10)) })
		})
	}
}

func TestSenderBlocking(t *testing.T) {
	for _, bt := range []DataType{AlignedBarrier, TimeoutableAlignedBarrier} {
		s := newSender(t, 5)
		require.ErrorIs(t, s.Resume(), ErrNotBlocked)
		s.Sent(bt, 1)
		require.True(t, s.Blocked())
		require.False(t, s.CanSend(true))
		require.False(t, s.CanSend(false))
		require.NoError(t, s.AddCredit(1), "credit may arrive while blocked")
		require.NoError(t, s.Resume())
		require.True(t, s.CanSend(true))
		require.ErrorIs(t, s.Resume(), ErrNotBlocked)
	}
	s := newSender(t, 5)
	s.Sent(PrioritizedEvent, 1)
	require.False(t, s.Blocked(), "unaligned barriers do not block")
}

func TestBacklogAnnouncement(t *testing.T) {
	s := newSender(t, 1)
	require.False(t, s.NeedBacklogAnnouncement(3), "credit left")
	s.Sent(Data, 1)
	require.False(t, s.NeedBacklogAnnouncement(0), "nothing queued")
	require.True(t, s.NeedBacklogAnnouncement(2))
	require.False(t, s.NeedBacklogAnnouncement(2), "exactly once")
	require.False(t, s.NeedBacklogAnnouncement(5), "not again for a larger backlog")
	s.Sent(Event, 1)
	require.False(t, s.NeedBacklogAnnouncement(5), "events change nothing")
	require.NoError(t, s.AddCredit(1))
	require.False(t, s.NeedBacklogAnnouncement(5), "credit available")
	s.Sent(Data, 1)
	require.True(t, s.NeedBacklogAnnouncement(4), "credit arrived and ran out again")
	require.False(t, s.NeedBacklogAnnouncement(4))

	// Blocked: announce only after resume.
	s = newSender(t, 0)
	s.Sent(AlignedBarrier, 1)
	require.False(t, s.NeedBacklogAnnouncement(3))
	require.NoError(t, s.Resume())
	require.True(t, s.NeedBacklogAnnouncement(3))

	// Initial credit 0: the first queued data is announced.
	s = newSender(t, 0)
	require.True(t, s.NeedBacklogAnnouncement(1))
}
