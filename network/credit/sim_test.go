package credit

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
)

var simSeed = flag.Uint64("sim.seed", 0, "run the credit simulation with this seed only")

// The simulation drives Senders, Channels and a Pool over a simulated link:
// per channel a producer queue at the sender, a FIFO of frames to the
// client and a FIFO of credit/resume frames to the server, and a consumer
// that consumes what the channel received, in order.

type simMsg struct {
	announce bool
	seq      uint32
	typ      DataType
	n        int // buffers
	backlog  int
	credit   uint32 // c→s: ADD_CREDIT, 0 = RESUME_CONSUMPTION
}

type simHeld struct {
	typ DataType
	src Source
}

type simLink struct {
	s       *Sender
	c       *Channel
	queue   []DataType // producer queue
	toC     []simMsg
	toS     []simMsg
	held    []simHeld // received, not yet consumed
	sentAll int       // buffers produced
	gotAll  int       // buffers consumed
}

func (l *simLink) backlog() int {
	n := 0
	for _, t := range l.queue {
		if t.IsData() {
			n++
		}
	}
	return n
}

type sim struct {
	t     *testing.T
	rng   *rand.Rand
	pool  *Pool
	links []*simLink
	step  int
	log   []string
}

func (s *sim) fail(format string, args ...any) {
	s.t.Helper()
	tail := s.log
	if len(tail) > 30 {
		tail = tail[len(tail)-30:]
	}
	for _, l := range tail {
		s.t.Log(l)
	}
	s.t.Fatalf("step %d: "+format, append([]any{s.step}, args...)...)
}

func (s *sim) logf(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf("%d: ", s.step)+fmt.Sprintf(format, args...))
	if len(s.log) > 200 {
		s.log = s.log[100:]
	}
}

func (s *sim) produce(l *simLink) {
	typ := Data
	switch r := s.rng.IntN(20); {
	case r == 0:
		typ = AlignedBarrier
	case r == 1:
		typ = TimeoutableAlignedBarrier
	case r == 2:
		typ = Event
	}
	l.queue = append(l.queue, typ)
	l.sentAll++
	s.logf("ch%d produce %d", l.c.Index(), typ)
}

// send is the server writer: send what credit allows, then announce the
// backlog if due.
func (s *sim) send(l *simLink) {
	if len(l.queue) > 0 && l.s.CanSend(l.queue[0].IsData()) {
		typ := l.queue[0]
		n := 1
		if typ.IsData() {
			for n < l.s.Credit() && n < len(l.queue) && l.queue[n].IsData() && s.rng.IntN(2) == 0 {
				n++
			}
		}
		l.queue = l.queue[n:]
		seq := l.s.Sent(typ, n)
		l.toC = append(l.toC, simMsg{seq: seq, typ: typ, n: n, backlog: l.backlog()})
		s.logf("ch%d send %d×%d seq %d backlog %d credit %d", l.c.Index(), n, typ, seq, l.backlog(), l.s.Credit())
	}
	if l.s.NeedBacklogAnnouncement(l.backlog()) {
		l.toC = append(l.toC, simMsg{announce: true, backlog: l.backlog()})
		s.logf("ch%d announce backlog %d", l.c.Index(), l.backlog())
	}
}

// onBacklog checks that a backlog leads to floating requests.
func (s *sim) onBacklog(l *simLink, backlog int) {
	c := l.c
	wanted := c.Available() < backlog+c.exclusive && !c.Waiting() && s.pool.Available() > 0
	before := c.Floating()
	c.OnBacklog(uint32(backlog))
	if wanted && c.Floating() == before {
		s.fail("ch%d: backlog %d with %d free, pool has %d, but no floating buffer requested", c.Index(), backlog, c.Available(), s.pool.Available())
	}
}

func (s *sim) deliverToClient(l *simLink) {
	if len(l.toC) == 0 {
		return
	}
	m := l.toC[0]
	l.toC = l.toC[1:]
	if m.announce {
		s.logf("ch%d deliver announce %d", l.c.Index(), m.backlog)
		s.onBacklog(l, m.backlog)
		return
	}
	s.logf("ch%d deliver %d×%d seq %d", l.c.Index(), m.n, m.typ, m.seq)
	for i := range m.n {
		if err := l.c.Receive(m.seq + uint32(i)); err != nil {
			s.fail("ch%d: %v", l.c.Index(), err)
		}
		h := simHeld{typ: m.typ}
		if m.typ.IsData() {
			src, err := l.c.Take()
			if err != nil {
				s.fail("ch%d: data buffer without credit: %v", l.c.Index(), err)
			}
			h.src = src
		}
		l.held = append(l.held, h)
	}
	s.onBacklog(l, m.backlog)
}

func (s *sim) deliverToServer(l *simLink) {
	if len(l.toS) == 0 {
		return
	}
	m := l.toS[0]
	l.toS = l.toS[1:]
	if m.credit == 0 {
		if err := l.s.Resume(); err != nil {
			s.fail("ch%d: %v", l.c.Index(), err)
		}
		s.logf("ch%d resume", l.c.Index())
		return
	}
	if err := l.s.AddCredit(m.credit); err != nil {
		s.fail("ch%d: %v", l.c.Index(), err)
	}
	s.logf("ch%d add credit %d → %d", l.c.Index(), m.credit, l.s.Credit())
}

func (s *sim) consume(l *simLink) {
	if len(l.held) == 0 {
		return
	}
	h := l.held[0]
	l.held = l.held[1:]
	l.gotAll++
	if h.typ.IsData() {
		l.c.Recycle(h.src)
	}
	if h.typ.BlocksUpstream() {
		l.toS = append(l.toS, simMsg{credit: 0})
	}
	s.logf("ch%d consume %d", l.c.Index(), h.typ)
}

// flush is the client writer: one ADD_CREDIT per credited channel.
func (s *sim) flush() {
	for _, c := range s.pool.Credited(nil) {
		if n := c.TakeUnannouncedCredit(); n > 0 {
			l := s.links[c.Index()]
			l.toS = append(l.toS, simMsg{credit: uint32(n)})
			s.logf("ch%d flush credit %d", c.Index(), n)
		}
	}
}

func (s *sim) check() {
	s.t.Helper()
	floating := 0
	for _, l := range s.links {
		c := l.c
		floating += c.Floating()
		if got, want := c.Held()+c.Available(), c.exclusive+c.Floating(); got != want {
			s.fail("ch%d holds %d buffers, exclusive + floating = %d", c.Index(), got, want)
		}
		// Credit conservation: every free buffer is credit somewhere.
		inflight := 0
		for _, m := range l.toC {
			if !m.announce && m.typ.IsData() {
				inflight += m.n
			}
		}
		pending := 0
		for _, m := range l.toS {
			pending += int(m.credit)
		}
		if l.s.Credit()+inflight+pending+c.Unannounced() != c.Available() {
			s.fail("ch%d: sender credit %d + in flight %d + ADD_CREDIT pending %d + unannounced %d != free %d",
				c.Index(), l.s.Credit(), inflight, pending, c.Unannounced(), c.Available())
		}
	}
	if floating+s.pool.Available() != s.pool.Size() || floating > s.pool.Size() {
		s.fail("floating in use %d + available %d != pool size %d", floating, s.pool.Available(), s.pool.Size())
	}
}

func (s *sim) drained() bool {
	for _, l := range s.links {
		if len(l.queue)+len(l.toC)+len(l.toS)+len(l.held) > 0 {
			return false
		}
	}
	return true
}

func runSim(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	pool, err := NewPool(rng.IntN(5))
	if err != nil {
		t.Fatal(err)
	}
	s := &sim{t: t, rng: rng, pool: pool}
	n := 1 + rng.IntN(4)
	for range n {
		ex := rng.IntN(4)
		if ex == 0 && pool.Size() == 0 {
			ex = 1 // a channel with no buffer at all can never receive data
		}
		c, err := pool.NewChannel(ex)
		if err != nil {
			t.Fatal(err)
		}
		snd, err := NewSender(c.InitialCredit())
		if err != nil {
			t.Fatal(err)
		}
		s.links = append(s.links, &simLink{s: snd, c: c})
	}
	defer func() {
		if t.Failed() {
			t.Logf("seed %d (rerun: go test -run TestSimulation -sim.seed=%d)", seed, seed)
		}
	}()
	// Random phase.
	for s.step = 0; s.step < steps; s.step++ {
		l := s.links[rng.IntN(len(s.links))]
		switch rng.IntN(6) {
		case 0:
			s.produce(l)
		case 1:
			s.send(l)
		case 2:
			s.deliverToClient(l)
		case 3:
			s.deliverToServer(l)
		case 4:
			if rng.IntN(3) == 0 { // a slow consumer
				s.consume(l)
			}
		case 5:
			s.flush()
		}
		s.check()
		if t.Failed() {
			return
		}
	}
	// Drain: nothing more is produced, every party keeps working; all
	// queued data must arrive.
	for round := 0; !s.drained(); round++ {
		if round > 100_000 {
			for _, l := range s.links {
				t.Logf("ch%d queue=%d toC=%d toS=%d held=%d credit=%d blocked=%v free=%d unannounced=%d waiting=%v",
					l.c.Index(), len(l.queue), len(l.toC), len(l.toS), len(l.held), l.s.Credit(), l.s.Blocked(),
					l.c.Available(), l.c.Unannounced(), l.c.Waiting())
			}
			s.fail("deadlock: not drained after %d rounds", round)
		}
		for _, l := range s.links {
			s.send(l)
			s.deliverToClient(l)
			s.flush()
			s.deliverToServer(l)
			s.consume(l)
			s.check()
			s.step++
		}
	}
	for _, l := range s.links {
		if l.gotAll != l.sentAll {
			s.fail("ch%d produced %d, consumed %d", l.c.Index(), l.sentAll, l.gotAll)
		}
		l.c.Release()
	}
	if pool.Available() != pool.Size() {
		s.fail("after release pool has %d of %d", pool.Available(), pool.Size())
	}
}

func TestSimulation(t *testing.T) {
	if *simSeed != 0 {
		runSim(t, *simSeed, 5000)
		return
	}
	seeds := 100
	if testing.Short() {
		seeds = 30
	}
	base := rand.Uint64()
	for i := range seeds {
		seed := base + uint64(i)
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runSim(t, seed, 5000) })
		if t.Failed() {
			return
		}
	}
}
