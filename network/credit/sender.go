package credit

import (
	"errors"
	"fmt"
)

// MaxCredit is the most credit a receiver may hold (2^31−1).
const MaxCredit = 1<<31 - 1

// DataType is the data type of a buffer (docs/protocol.md "Data types");
// the values equal wire.DataType's and buffer.DataType's, so converting is
// a cast.
type DataType uint8

const (
	Data                      DataType = 0 // takes one credit
	Event                     DataType = 1
	PrioritizedEvent          DataType = 2
	AlignedBarrier            DataType = 3 // blocks until Resume
	TimeoutableAlignedBarrier DataType = 4 // blocks until Resume
)

// IsData reports whether t takes credit.
func (t DataType) IsData() bool { return t == Data }

// BlocksUpstream reports whether the sender stops after t until Resume.
func (t DataType) BlocksUpstream() bool {
	return t == AlignedBarrier || t == TimeoutableAlignedBarrier
}

// Errors for bad peer input. ErrZeroCredit and ErrCreditOverflow are
// protocol errors of the client.
var (
	ErrZeroCredit     = errors.New("credit: credit of 0 added")
	ErrCreditOverflow = errors.New("credit: credit exceeds 2^31-1")
	ErrNotBlocked     = errors.New("credit: resume of a receiver that is not blocked")
)

// Sender is the credit state the producer side keeps for one receiver:
// how many data buffers it may still send, the next sequence number,
// whether an aligned barrier blocks it, and whether it owes a backlog
// announcement.
type Sender struct {
	credit    int
	nextSeq   uint32
	blocked   bool
	announced bool // a backlog announcement went out since credit last arrived
}

// NewSender returns a Sender holding the receiver's initial credit. It
// returns an error wrapping ErrCreditOverflow if initialCredit exceeds
// MaxCredit.
func NewSender(initialCredit uint32) (*Sender, error) {
	if initialCredit > MaxCredit {
		return nil, fmt.Errorf("%w: initial credit %d", ErrCreditOverflow, initialCredit)
	}
	return &Sender{credit: int(initialCredit)}, nil
}

// Credit returns how many data buffers may still be sent.
func (s *Sender) Credit() int { return s.credit }

// NextSequence returns the sequence number of the next buffer.
func (s *Sender) NextSequence() uint32 { return s.nextSeq }

// Blocked reports whether an aligned barrier was sent and not yet resumed.
func (s *Sender) Blocked() bool { return s.blocked }

// AddCredit adds n credits (ADD_CREDIT). It returns an error wrapping
// ErrZeroCredit for n = 0 and ErrCreditOverflow if the credit would exceed
// MaxCredit; the credit is then unchanged.
func (s *Sender) AddCredit(n uint32) error {
	if n == 0 {
		return ErrZeroCredit
	}
	if uint64(s.credit)+uint64(n) > MaxCredit {
		return fmt.Errorf("%w: %d + %d", ErrCreditOverflow, s.credit, n)
	}
	s.credit += int(n)
	s.announced = false
	return nil
}

// CanSend reports whether the next buffer may be sent now: nothing is sent
// while blocked, and a data buffer needs a credit.
func (s *Sender) CanSend(nextIsData bool) bool {
	return !s.blocked && (!nextIsData || s.credit > 0)
}

// Sent records that a frame of type t carrying n buffers was sent (n > 1
// only for a partial-buffer response of data buffers) and returns the
// sequence number of its first buffer. It takes n credits for data and
// blocks the sender after an aligned barrier. Sending what CanSend forbids
// is a bug and panics.
func (s *Sender) Sent(t DataType, n int) (firstSeq uint32) {
	switch {
	case t > TimeoutableAlignedBarrier:
		panic(fmt.Sprintf("credit: sent unknown data type %d", t))
	case s.blocked:
		panic(fmt.Sprintf("credit: sent data type %d while blocked", t))
	case n < 1 || (!t.IsData() && n != 1):
		panic(fmt.Sprintf("credit: sent %d buffers of data type %d", n, t))
	case t.IsData() && n > s.credit:
		panic(fmt.Sprintf("credit: sent %d data buffers with credit %d", n, s.credit))
	}
	if t.IsData() {
		s.credit -= n
	}
	s.blocked = t.BlocksUpstream()
	firstSeq = s.nextSeq
	s.nextSeq += uint32(n)
	return firstSeq
}

// Resume unblocks the sender (RESUME_CONSUMPTION). It returns
// ErrNotBlocked if the sender was not blocked.
func (s *Sender) Resume() error {
	if !s.blocked {
		return ErrNotBlocked
	}
	s.blocked = false
	return nil
}

// NeedBacklogAnnouncement reports whether a BACKLOG_ANNOUNCEMENT of
// backlog (data buffers queued) must be sent now: it returns true once
// when the credit is 0 and backlog > 0, and not again until credit has
// arrived and run out again. A blocked sender announces nothing
// (docs/protocol.md "Aligned barriers": nothing is sent until
// RESUME_CONSUMPTION); it announces after
// Resume if still due. The caller must send the announcement when this
// returns true.
func (s *Sender) NeedBacklogAnnouncement(backlog int) bool {
	if s.blocked || s.credit > 0 || backlog <= 0 || s.announced {
		return false
	}
	s.announced = true
	return true
}
