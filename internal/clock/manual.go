package clock

import (
	"sort"
	"sync"
	"time"
)

// Manual is a Clock for tests: its time changes only through Advance and
// Set, which fire every timer that has come due, earliest first. It is safe
// for concurrent use.
type Manual struct {
	cond *sync.Cond // on mu; signalled when the set of armed timers changes
	mu   struct {
		sync.Mutex
		now    time.Time
		armed  map[*manualTimer]struct{}
		serial uint64 // creation order, to fire equal deadlines stably
	}
}

var _ Clock = (*Manual)(nil)

// NewManual returns a manual clock that reads start.
func NewManual(start time.Time) *Manual {
	m := &Manual{}
	m.mu.now, m.mu.armed = start, make(map[*manualTimer]struct{})
	m.cond = sync.NewCond(&m.mu)
	return m
}

// Now returns the clock's current time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.now
}

// NewTimer returns a timer that fires once the clock reaches now+d.
func (m *Manual) NewTimer(d time.Duration) Timer {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := &manualTimer{m: m, c: make(chan time.Time, 1)}
	m.armLocked(t, d)
	return t
}

// Advance moves the clock forward by d (d < 0 is treated as 0) and fires
// every timer due by then.
func (m *Manual) Advance(d time.Duration) {
	if d < 0 {
		d = 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setLocked(m.mu.now.Add(d))
}

// Set moves the clock to t; a t before the current time leaves the clock
// where it is. Timers due by then fire.
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.Before(m.mu.now) {
		t = m.mu.now
	}
	m.setLocked(t)
}

// Timers returns the number of armed timers.
func (m *Manual) Timers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mu.armed)
}

// Next returns the earliest deadline of an armed timer.
func (m *Manual) Next() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var next time.Time
	ok := false
	for t := range m.mu.armed {
		if !ok || t.when.Before(next) {
			next, ok = t.when, true
		}
	}
	return next, ok
}

// BlockUntil blocks until at least n timers are armed.
func (m *Manual) BlockUntil(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.mu.armed) < n {
		m.cond.Wait()
	}
}

func (m *Manual) setLocked(to time.Time) {
	m.mu.now = to
	var due []*manualTimer
	for t := range m.mu.armed {
		if !t.when.After(to) {
			due = append(due, t)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		if !due[i].when.Equal(due[j].when) {
			return due[i].when.Before(due[j].when)
		}
		return due[i].serial < due[j].serial
	})
	for _, t := range due {
		m.fireLocked(t)
	}
	if len(due) > 0 {
		m.cond.Broadcast()
	}
}

func (m *Manual) armLocked(t *manualTimer, d time.Duration) {
	m.mu.serial++
	t.serial = m.mu.serial
	t.when = m.mu.now.Add(d)
	if d <= 0 {
		m.fireLocked(t)
		return
	}
	m.mu.armed[t] = struct{}{}
	m.cond.Broadcast()
}

func (m *Manual) fireLocked(t *manualTimer) {
	delete(m.mu.armed, t)
	select {
	case t.c <- t.when:
	default: // a value is already waiting; timers fire once per arming
	}
}

type manualTimer struct {
	m      *Manual
	c      chan time.Time
	when   time.Time
	serial uint64
}

func (t *manualTimer) C() <-chan time.Time { return t.c }

func (t *manualTimer) Stop() bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	return t.stopLocked()
}

func (t *manualTimer) Reset(d time.Duration) bool {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	was := t.stopLocked()
	t.m.armLocked(t, d)
	return was
}

// stopLocked disarms t and drops a fired value nobody received, so that no
// stale value is seen after Stop or Reset.
func (t *manualTimer) stopLocked() bool {
	_, was := t.m.mu.armed[t]
	if was {
		delete(t.m.mu.armed, t)
		t.m.cond.Broadcast()
	}
	select {
	case <-t.c:
	default:
	}
	return was
}
