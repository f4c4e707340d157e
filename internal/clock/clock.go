// Package clock is the time seam of weir's drivers: a Clock tells the time
// and makes timers. Real is the operating system's clock; Manual is a clock
// whose time moves only when a test says so.
//
// Pure cores never read a clock: drivers read it and pass the time in.
package clock

import "time"

// Clock tells the current time and makes timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once, d after now. A d <= 0 fires
	// at once.
	NewTimer(d time.Duration) Timer
}

// Timer fires once on its channel, like time.Timer with Go 1.23 semantics:
// after Stop or Reset returns, no stale value is received from C.
type Timer interface {
	// C delivers the time at which the timer fired.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether the call
	// stopped an armed timer.
	Stop() bool
	// Reset re-arms the timer to fire d after now. It reports whether the
	// timer was armed before the call.
	Reset(d time.Duration) bool
}

// Real returns the operating system's clock (under testing/synctest, the
// bubble's fake clock).
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }
