package credit

import (
	"errors"
	"fmt"
)

// Source says whether a buffer a Channel holds is one of its exclusive
// buffers or a floating buffer from the gate's Pool.
type Source uint8

const (
	Exclusive Source = iota + 1
	Floating
)

func (s Source) String() string {
	switch s {
	case Exclusive:
		return "exclusive"
	case Floating:
		return "floating"
	}
	return fmt.Sprintf("Source(%d)", uint8(s))
}

// ErrNoCredit is returned by Channel.Take when a data buffer arrives for
// which the channel never announced credit: the sender broke the protocol.
var ErrNoCredit = errors.New("credit: data buffer received without credit")

// SequenceError is returned by Channel.Receive for a buffer out of
// sequence (lost, duplicated or reordered).
type SequenceError struct {
	Expected, Got uint32
}

func (e *SequenceError) Error() string {
	return fmt.Sprintf("credit: buffer sequence %d, expected %d", e.Got, e.Expected)
}

// Pool is the floating buffers of one input gate, shared by its channels:
// it grants them to channels whose sender has a backlog and, when all are
// granted, queues the channels that want more and serves them in order as
// floating buffers come back. It counts buffers; the driver holds the
// memory.
type Pool struct {
	size     int
	free     int
	granted  int        // floating buffers held by channels
	waiting  []*Channel // FIFO of channels waiting for a floating buffer
	credited []*Channel // channels whose unannounced credit became positive
	channels int
}

// NewPool returns a pool of n floating buffers. It returns an error if n is
// negative.
func NewPool(n int) (*Pool, error) {
	if n < 0 {
		return nil, fmt.Errorf("credit: negative floating buffer count %d", n)
	}
	return &Pool{size: n, free: n}, nil
}

// Size returns the number of floating buffers.
func (p *Pool) Size() int { return p.size }

// Available returns the floating buffers no channel holds.
func (p *Pool) Available() int { return p.free }

// Waiting returns the number of channels waiting for a floating buffer.
func (p *Pool) Waiting() int { return len(p.waiting) }

// NewChannel returns a channel of this pool's gate with exclusive
// exclusive buffers; channels are numbered 0, 1, … in creation order
// (Index). It returns an error if exclusive is negative or above MaxCredit.
func (p *Pool) NewChannel(exclusive int) (*Channel, error) {
	if exclusive < 0 || exclusive > MaxCredit {
		return nil, fmt.Errorf("credit: exclusive buffer count %d out of range", exclusive)
	}
	c := &Channel{pool: p, index: p.channels, exclusive: exclusive, freeExclusive: exclusive}
	p.channels++
	return c, nil
}

// Credited appends to dst the channels whose unannounced credit became
// positive since the last call, each once, in that order, and forgets them.
// The driver calls TakeUnannouncedCredit on each and sends ADD_CREDIT
// (skipping a 0: the credit may have been taken meanwhile).
func (p *Pool) Credited(dst []*Channel) []*Channel {
	for i, c := range p.credited {
		c.queued = false
		if !c.released {
			dst = append(dst, c)
		}
		p.credited[i] = nil
	}
	p.credited = p.credited[:0]
	return dst
}

// giveBack takes back one floating buffer and hands it to the first
// waiting channel that still needs it.
func (p *Pool) giveBack() {
	p.granted--
	for len(p.waiting) > 0 {
		c := p.popWaiting()
		c.waiting = false
		if c.available() >= c.required {
			continue // no longer needs it (Flink: BUFFER_NOT_USED)
		}
		p.granted++
		c.freeFloating++
		c.addCredit(1)
		if c.available() < c.required {
			c.waiting = true
			p.waiting = append(p.waiting, c)
		}
		p.check()
		return
	}
	p.free++
	p.check()
}

// popWaiting takes the first waiting channel off the queue. It shifts the
// rest down rather than reslicing, so the queue's array is reused: a
// channel queued again right away (one buffer at a time, the usual case)
// costs no allocation.
func (p *Pool) popWaiting() *Channel {
	c := p.waiting[0]
	n := copy(p.waiting, p.waiting[1:])
	p.waiting[n] = nil
	p.waiting = p.waiting[:n]
	return c
}

func (p *Pool) check() {
	if p.free < 0 || p.granted < 0 || p.free+p.granted != p.size || (p.free > 0 && len(p.waiting) > 0) {
		panic(fmt.Sprintf("credit: pool invariant broken: size=%d free=%d granted=%d waiting=%d",
			p.size, p.free, p.granted, len(p.waiting)))
	}
}

// Channel is the buffer accounting of one remote input channel (Flink's
// BufferManager, by counts): its exclusive buffers, the floating buffers
// granted to it, which of them are free (and so credit) and which hold
// received data, the credit not yet announced to the sender, and the next
// expected sequence number.
type Channel struct {
	pool  *Pool
	index int

	exclusive                   int
	freeExclusive, freeFloating int
	heldExclusive, heldFloating int
	required                    int // free buffers wanted: backlog + exclusive
	waiting                     bool
	unannounced                 int
	queued                      bool // in pool.credited
	nextSeq                     uint32
	released                    bool
}

// Index returns the channel's number within its gate.
func (c *Channel) Index() int { return c.index }

// InitialCredit returns the credit for PARTITION_REQUEST: the exclusive
// buffers.
func (c *Channel) InitialCredit() uint32 { return uint32(c.exclusive) }

// Available returns the free buffers (announced or not): what the sender
// may fill.
func (c *Channel) Available() int { return c.freeExclusive + c.freeFloating }

func (c *Channel) available() int { return c.freeExclusive + c.freeFloating }

// Held returns the buffers holding received data.
func (c *Channel) Held() int { return c.heldExclusive + c.heldFloating }

// Floating returns the floating buffers granted to the channel, free or
// held.
func (c *Channel) Floating() int { return c.freeFloating + c.heldFloating }

// Required returns how many free buffers the channel wants (last backlog +
// exclusive buffers).
func (c *Channel) Required() int { return c.required }

// Waiting reports whether the channel waits for a floating buffer.
func (c *Channel) Waiting() bool { return c.waiting }

// Unannounced returns the credit not yet taken by TakeUnannouncedCredit.
func (c *Channel) Unannounced() int { return c.unannounced }

// NextSequence returns the sequence number the next buffer must carry.
func (c *Channel) NextSequence() uint32 { return c.nextSeq }

// Released reports whether Release was called.
func (c *Channel) Released() bool { return c.released }

// Receive checks the sequence number of an arriving buffer (data or
// event; call it once per partial buffer). It returns a *SequenceError
// naming the expected and the received number if they differ.
func (c *Channel) Receive(seq uint32) error {
	c.mustLive("Receive")
	if seq != c.nextSeq {
		return &SequenceError{Expected: c.nextSeq, Got: seq}
	}
	c.nextSeq++
	return nil
}

// Take records that a data buffer arrived (call it once per partial
// buffer) and occupies a free buffer for it, a floating one first (as
// Flink does). The driver must Recycle the returned Source when the
// buffer is consumed. It returns an error wrapping ErrNoCredit if the
// channel has no announced credit left: the sender broke the protocol.
func (c *Channel) Take() (Source, error) {
	c.mustLive("Take")
	if c.available()-c.unannounced <= 0 {
		return 0, fmt.Errorf("%w: %d free buffers, %d of them unannounced", ErrNoCredit, c.available(), c.unannounced)
	}
	if c.freeFloating > 0 {
		c.freeFloating--
		c.heldFloating++
		return Floating, nil
	}
	c.freeExclusive--
	c.heldExclusive++
	return Exclusive, nil
}

// OnBacklog handles the sender's backlog (from every BUFFER_RESPONSE and
// BACKLOG_ANNOUNCEMENT): the channel wants backlog + exclusive free buffers
// and, unless it already waits, takes floating buffers from the pool until
// it has them, or queues for the pool when it runs dry. Each buffer gained
// is unannounced credit.
func (c *Channel) OnBacklog(backlog uint32) {
	c.mustLive("OnBacklog")
	c.required = int(backlog) + c.exclusive
	if c.waiting {
		return
	}
	p := c.pool
	n := 0
	for c.available() < c.required {
		if p.free == 0 {
			c.waiting = true
			p.waiting = append(p.waiting, c)
			break
		}
		p.free--
		p.granted++
		c.freeFloating++
		n++
	}
	c.addCredit(n)
	p.check()
	c.check()
}

// Recycle returns a buffer Take handed out, once its data is consumed. An
// exclusive buffer becomes credit again, unless the channel has more free
// buffers than it requires and a free floating one, which then goes back to
// the pool instead; a floating buffer goes back to the pool, which hands it
// to the first waiting channel. Every channel that gains credit this way is
// listed by Pool.Credited. Recycling a buffer the channel does not hold is a
// bug and panics. After Release, buffers go back (floating) or away
// (exclusive) without credit.
func (c *Channel) Recycle(src Source) {
	p := c.pool
	switch src {
	case Exclusive:
		if c.heldExclusive == 0 {
			panic(fmt.Sprintf("credit: channel %d recycled an exclusive buffer it does not hold (held exclusive=%d floating=%d)",
				c.index, c.heldExclusive, c.heldFloating))
		}
		c.heldExclusive--
		if c.released {
			return
		}
		c.freeExclusive++
		if c.available() > c.required && c.freeFloating > 0 {
			c.freeFloating--
			p.giveBack()
		} else {
			c.addCredit(1)
		}
	case Floating:
		if c.heldFloating == 0 {
			panic(fmt.Sprintf("credit: channel %d recycled a floating buffer it does not hold (held exclusive=%d floating=%d)",
				c.index, c.heldExclusive, c.heldFloating))
		}
		c.heldFloating--
		p.giveBack()
	default:
		panic(fmt.Sprintf("credit: recycle of %s", src))
	}
	c.check()
}

// TakeUnannouncedCredit returns the credit gained since the last call and
// resets it: the driver sends it as one ADD_CREDIT (if > 0).
func (c *Channel) TakeUnannouncedCredit() int {
	n := c.unannounced
	c.unannounced = 0
	return n
}

// Release ends the channel (end of partition, cancellation, failure): its
// free floating buffers go back to the pool, it leaves the pool's queue,
// and its unannounced credit is dropped. Held buffers must still be
// recycled. Release is idempotent.
func (c *Channel) Release() {
	if c.released {
		return
	}
	c.released = true
	p := c.pool
	if c.waiting {
		for i, w := range p.waiting {
			if w == c {
				p.waiting = append(p.waiting[:i], p.waiting[i+1:]...)
				break
			}
		}
		c.waiting = false
	}
	c.required = 0
	c.unannounced = 0
	c.freeExclusive = 0
	for c.freeFloating > 0 {
		c.freeFloating--
		p.giveBack()
	}
}

func (c *Channel) addCredit(n int) {
	if n == 0 {
		return
	}
	c.unannounced += n
	if !c.queued {
		c.queued = true
		c.pool.credited = append(c.pool.credited, c)
	}
}

func (c *Channel) mustLive(op string) {
	if c.released {
		panic(fmt.Sprintf("credit: %s on released channel %d", op, c.index))
	}
}

func (c *Channel) check() {
	if c.released {
		return
	}
	if c.freeExclusive < 0 || c.freeFloating < 0 || c.heldExclusive < 0 || c.heldFloating < 0 ||
		c.freeExclusive+c.heldExclusive != c.exclusive ||
		c.unannounced < 0 || c.unannounced > c.available() {
		panic(fmt.Sprintf("credit: channel %d invariant broken: exclusive=%d free=%d/%d (excl/float) held=%d/%d unannounced=%d",
			c.index, c.exclusive, c.freeExclusive, c.freeFloating, c.heldExclusive, c.heldFloating, c.unannounced))
	}
}
