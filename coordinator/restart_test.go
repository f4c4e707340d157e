package coordinator

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNoRestart(t *testing.T) {
	var s RestartStrategy = NoRestart{}
	_, ok := s.Next(t0)
	require.False(t, ok)
}

func TestFixedDelay(t *testing.T) {
	for _, bad := range []FixedDelayConfig{{Attempts: 0}, {Attempts: -1}, {Attempts: 1, Delay: -time.Second}} {
		_, err := NewFixedDelay(bad)
		require.True(t, errors.Is(err, ErrInvalidConfig), "%+v", bad)
	}
	s, err := NewFixedDelay(FixedDelayConfig{Attempts: 2, Delay: 3 * time.Second})
	require.NoError(t, err)
	for range 2 {
		d, ok := s.Next(t0)
		require.True(t, ok)
		require.Equal(t, 3*time.Second, d)
	}
	_, ok := s.Next(t0)
	require.False(t, ok)
	s.Reset()
	_, ok = s.Next(t0)
	require.True(t, ok)
}

func TestExponentialDelayValidation(t *testing.T) {
	for _, bad := range []ExponentialDelayConfig{
		{Initial: -time.Second},
		{Initial: time.Minute, Max: time.Second},
		{Multiplier: 0.5},
		{Jitter: 1.5},
		{Jitter: -0.1},
		{ResetAfter: -time.Second},
		{Attempts: -1},
	} {
		_, err := NewExponentialDelay(bad)
		require.True(t, errors.Is(err, ErrInvalidConfig), "%+v", bad)
	}
}

func TestExponentialDelay(t *testing.T) {
	type step struct {
		at   time.Duration // failure time after t0
		want time.Duration
		ok   bool
	}
	tests := []struct {
		name  string
		cfg   ExponentialDelayConfig
		steps []step
	}{
		{
			name: "grows by the multiplier up to max",
			cfg:  ExponentialDelayConfig{Initial: time.Second, Max: 10 * time.Second, Multiplier: 2},
			steps: []step{
				{0, time.Second, true},
				{2 * time.Second, 2 * time.Second, true},
				{5 * time.Second, 4 * time.Second, true},
				{10 * time.Second, 8 * time.Second, true},
				{20 * time.Second, 10 * time.Second, true},
				{31 * time.Second, 10 * time.Second, true},
			},
		},
		{
			name: "a quiet period after the last restart resets the backoff",
			cfg:  ExponentialDelayConfig{Initial: time.Second, Max: time.Minute, Multiplier: 2, ResetAfter: time.Minute},
			steps: []step{
				{0, time.Second, true},                    // restart at 1s
				{30 * time.Second, 2 * time.Second, true}, // restart at 32s
				{91 * time.Second, 4 * time.Second, true}, // 59s after: not quiet long enough
				{155 * time.Second, time.Second, true},    // 60s after 95s: reset
				{156 * time.Second, 2 * time.Second, true},
			},
		},
		{
			name: "attempts bound the restarts until a reset",
			cfg:  ExponentialDelayConfig{Initial: time.Second, Multiplier: 2, Attempts: 2, ResetAfter: time.Hour},
			steps: []step{
				{0, time.Second, true},
				{time.Minute, 2 * time.Second, true},
				{2 * time.Minute, 0, false},
				{3 * time.Hour, time.Second, true},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewExponentialDelay(tc.cfg)
			require.NoError(t, err)
			for i, st := range tc.steps {
				d, ok := s.Next(t0.Add(st.at))
				require.Equal(t, st.ok, ok, "step %d", i)
				require.Equal(t, st.want, d, "step %d", i)
			}
			s.Reset()
			d, ok := s.Next(t0.Add(100 * time.Hour))
			require.True(t, ok)
			require.Equal(t, tc.cfg.Initial, d)
		})
	}
}

func TestExponentialDelayJitter(t *testing.T) {
	mk := func(seed uint64) *ExponentialDelay {
		s, err := NewExponentialDelay(ExponentialDelayConfig{Initial: 10 * time.Second, Max: time.Minute,
			Multiplier: 2, Jitter: 0.1, Rand: rand.New(rand.NewPCG(seed, seed))})
		require.NoError(t, err)
		return s
	}
	a, b := mk(7), mk(7)
	at := t0
	base := 10 * time.Second
	for range 6 {
		da, ok := a.Next(at)
		require.True(t, ok)
		db, _ := b.Next(at)
		require.Equal(t, da, db, "same seed, same delays")
		require.InDelta(t, float64(base), float64(da), float64(base)/10)
		require.LessOrEqual(t, da, time.Minute)
		at = at.Add(da + time.Second)
		base = min(2*base, time.Minute)
	}
}

func TestFailureRateValidation(t *testing.T) {
	for _, bad := range []FailureRateConfig{
		{MaxFailures: 0, Interval: time.Minute},
		{MaxFailures: 1},
		{MaxFailures: 1, Interval: -time.Second},
		{MaxFailures: 1, Interval: time.Minute, Delay: -time.Second},
	} {
		_, err := NewFailureRate(bad)
		require.True(t, errors.Is(err, ErrInvalidConfig), "%+v", bad)
	}
}

// Flink's FailureRateRestartBackoffTimeStrategyTest: MaxFailures failures
// within the interval restart, one more fails the job; failures further
// apart than the interval never add up.
func TestFailureRate(t *testing.T) {
	s, err := NewFailureRate(FailureRateConfig{MaxFailures: 3, Interval: 10 * time.Second, Delay: time.Second})
	require.NoError(t, err)
	for i := range 3 {
		d, ok := s.Next(t0.Add(time.Duration(i) * time.Second))
		require.True(t, ok, "failure %d", i+1)
		require.Equal(t, time.Second, d)
	}
	_, ok := s.Next(t0.Add(3 * time.Second))
	require.False(t, ok, "a 4th failure within 10 s")
	s.Reset()
	_, ok = s.Next(t0.Add(4 * time.Second))
	require.True(t, ok, "after Reset")

	s, err = NewFailureRate(FailureRateConfig{MaxFailures: 1, Interval: time.Second})
	require.NoError(t, err)
	for i := range 10 {
		_, ok := s.Next(t0.Add(time.Duration(i) * (time.Second + time.Millisecond)))
		require.True(t, ok, "failure %d, more than the interval after the previous one", i+1)
	}
	_, ok = s.Next(t0.Add(9*(time.Second+time.Millisecond) + time.Second))
	require.False(t, ok, "exactly the interval after the previous failure: both count")
}

// A sliding window: the oldest failures leave it, the limit holds over
// every window of the interval's length, compared with a naive count.
func TestFailureRateSlidingWindow(t *testing.T) {
	const maxFailures, interval = 3, 10 * time.Second
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for range 200 {
		s, err := NewFailureRate(FailureRateConfig{MaxFailures: maxFailures, Interval: interval})
		require.NoError(t, err)
		var times []time.Time
		at := t0
		for range 50 {
			at = at.Add(time.Duration(rng.IntN(6000)) * time.Millisecond)
			times = append(times, at)
			n := 0
			for _, x := range times {
				if at.Sub(x) <= interval {
					n++
				}
			}
			_, ok := s.Next(at)
			require.Equal(t, n <= maxFailures, ok, "seed %d: failure at %v with %d within the interval", seed, at.Sub(t0), n)
			if !ok {
				break
			}
		}
	}
}
