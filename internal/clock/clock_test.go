package clock

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func received(t Timer) (time.Time, bool) {
	select {
	case v := <-t.C():
		return v, true
	default:
		return time.Time{}, false
	}
}

func TestManualFiresInOrderAtDeadline(t *testing.T) {
	m := NewManual(epoch)
	a := m.NewTimer(2 * time.Second)
	b := m.NewTimer(time.Second)
	require.Equal(t, 2, m.Timers())
	next, ok := m.Next()
	require.True(t, ok)
	require.Equal(t, epoch.Add(time.Second), next)

	m.Advance(999 * time.Millisecond)
	_, fired := received(b)
	require.False(t, fired)

	m.Advance(time.Millisecond)
	v, fired := received(b)
	require.True(t, fired)
	require.Equal(t, epoch.Add(time.Second), v)
	_, fired = received(a)
	require.False(t, fired)

	m.Set(epoch.Add(time.Hour))
	v, fired = received(a)
	require.True(t, fired)
	require.Equal(t, epoch.Add(2*time.Second), v)
	require.Equal(t, epoch.Add(time.Hour), m.Now())
	require.Equal(t, 0, m.Timers())
}

func TestManualStopResetNoStaleValue(t *testing.T) {
	m := NewManual(epoch)
	tm := m.NewTimer(time.Second)
	require.True(t, tm.Stop())
	require.False(t, tm.Stop())
	m.Advance(time.Hour)
	_, fired := received(tm)
	require.False(t, fired)

	// Fired but unreceived, then Reset: the old value is dropped.
	require.False(t, tm.Reset(time.Second))
	m.Advance(time.Second)
	require.False(t, tm.Reset(time.Minute))
	_, fired = received(tm)
	require.False(t, fired)
	m.Advance(time.Minute)
	v, fired := received(tm)
	require.True(t, fired)
	require.Equal(t, m.Now(), v)

	// Non-positive durations fire at once; time never goes backwards.
	now := m.Now()
	z := m.NewTimer(0)
	_, fired = received(z)
	require.True(t, fired)
	m.Set(epoch)
	m.Advance(-time.Hour)
	require.Equal(t, now, m.Now())
}

func TestManualBlockUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := NewManual(epoch)
		done := make(chan struct{})
		go func() {
			m.BlockUntil(1)
			close(done)
		}()
		tm := m.NewTimer(time.Second)
		<-done
		tm.Stop()
	})
}

func TestRealClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := Real()
		start := c.Now()
		tm := c.NewTimer(time.Minute)
		v := <-tm.C()
		require.Equal(t, time.Minute, v.Sub(start))
		require.False(t, tm.Stop())
		require.False(t, tm.Reset(time.Second))
		require.True(t, tm.Stop())
	})
}
