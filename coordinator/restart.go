package coordinator

import (
	"math/rand/v2"
	"time"
)

// RestartStrategy decides whether and when a failed job restarts. It is a
// pure state machine: time enters as arguments, jitter comes from an
// injected random source. Not safe for concurrent use.
type RestartStrategy interface {
	// Next records a failure at failureTime and returns how long to wait
	// before restarting, or ok=false if the job must not restart.
	Next(failureTime time.Time) (delay time.Duration, ok bool)
	// Reset forgets past failures.
	Reset()
}

// NoRestart never restarts.
type NoRestart struct{}

func (NoRestart) Next(time.Time) (time.Duration, bool) { return 0, false }
func (NoRestart) Reset()                               {}

// FixedDelayConfig configures a FixedDelay strategy.
type FixedDelayConfig struct {
	Attempts int           // restarts allowed (≥ 1)
	Delay    time.Duration // wait before each restart (≥ 0)
}

// FixedDelay restarts up to Attempts times, each after Delay (Flink's
// fixed-delay strategy).
type FixedDelay struct {
	cfg      FixedDelayConfig
	attempts int
}

// NewFixedDelay validates cfg and returns the strategy.
func NewFixedDelay(cfg FixedDelayConfig) (*FixedDelay, error) {
	switch {
	case cfg.Attempts < 1:
		return nil, invalid("fixed-delay restart: attempts %d, must be at least 1", cfg.Attempts)
	case cfg.Delay < 0:
		return nil, invalid("fixed-delay restart: negative delay %v", cfg.Delay)
	}
	return &FixedDelay{cfg: cfg}, nil
}

func (f *FixedDelay) Next(time.Time) (time.Duration, bool) {
	if f.attempts >= f.cfg.Attempts {
		return 0, false
	}
	f.attempts++
	return f.cfg.Delay, true
}

func (f *FixedDelay) Reset() { f.attempts = 0 }

// ExponentialDelayConfig configures an ExponentialDelay strategy. Zero
// fields take Flink's defaults, except Jitter.
type ExponentialDelayConfig struct {
	Initial    time.Duration // first delay (default 1s)
	Max        time.Duration // cap (default 5m)
	Multiplier float64       // growth per failure, ≥ 1 (default 1.5)
	// Jitter is the fraction (0..1) by which each delay is randomly moved
	// up or down; 0 means none (Flink's default is 0.1).
	Jitter float64
	// ResetAfter is the quiet period after which the delay starts over at
	// Initial: measured from the end of the previous backoff (default 1h).
	ResetAfter time.Duration
	// Attempts bounds the restarts between two resets (0: unlimited).
	Attempts int
	// Rand supplies the jitter (default: a fixed-seed source).
	Rand *rand.Rand
}

// ExponentialDelay is Flink's exponential-delay restart strategy: the
// delay starts at Initial and grows by Multiplier up to Max after each
// failure, with random jitter; after a quiet period of ResetAfter it starts
// over.
type ExponentialDelay struct {
	cfg      ExponentialDelayConfig
	current  time.Duration // backoff before jitter; 0 before the first failure
	restart  time.Time     // when the previous restart happened
	attempts int
}

// NewExponentialDelay validates cfg, applies defaults, and returns the
// strategy.
func NewExponentialDelay(cfg ExponentialDelayConfig) (*ExponentialDelay, error) {
	if cfg.Initial == 0 {
		cfg.Initial = time.Second
	}
	if cfg.Max == 0 {
		cfg.Max = 5 * time.Minute
	}
	if cfg.Multiplier == 0 {
		cfg.Multiplier = 1.5
	}
	if cfg.ResetAfter == 0 {
		cfg.ResetAfter = time.Hour
	}
	switch {
	case cfg.Initial < 0:
		return nil, invalid("exponential-delay restart: negative initial delay %v", cfg.Initial)
	case cfg.Max < cfg.Initial:
		return nil, invalid("exponential-delay restart: max %v below initial %v", cfg.Max, cfg.Initial)
	case !(cfg.Multiplier >= 1): // also rejects NaN
		return nil, invalid("exponential-delay restart: multiplier %v, must be at least 1", cfg.Multiplier)
	case !(cfg.Jitter >= 0 && cfg.Jitter <= 1):
		return nil, invalid("exponential-delay restart: jitter %v outside [0, 1]", cfg.Jitter)
	case cfg.ResetAfter < 0:
		return nil, invalid("exponential-delay restart: negative reset period %v", cfg.ResetAfter)
	case cfg.Attempts < 0:
		return nil, invalid("exponential-delay restart: negative attempts %d", cfg.Attempts)
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(1, 2))
	}
	return &ExponentialDelay{cfg: cfg}, nil
}

func (e *ExponentialDelay) Next(failureTime time.Time) (time.Duration, bool) {
	switch {
	case e.current == 0 || failureTime.Sub(e.restart) >= e.cfg.ResetAfter:
		e.current = e.cfg.Initial
		e.attempts = 0
	default:
		next := float64(e.current) * e.cfg.Multiplier
		if next >= float64(e.cfg.Max) {
			e.current = e.cfg.Max
		} else {
			e.current = time.Duration(next)
		}
	}
	if e.cfg.Attempts > 0 && e.attempts >= e.cfg.Attempts {
		return 0, false
	}
	e.attempts++
	delay := e.current
	if span := float64(e.current) * e.cfg.Jitter; span >= 1 {
		delay += time.Duration((e.cfg.Rand.Float64()*2 - 1) * span)
	}
	delay = min(max(delay, 0), e.cfg.Max)
	e.restart = failureTime.Add(delay)
	return delay, true
}

func (e *ExponentialDelay) Reset() {
	e.current = 0
	e.attempts = 0
	e.restart = time.Time{}
}

// FailureRateConfig configures a FailureRate strategy.
type FailureRateConfig struct {
	// MaxFailures is how many failures within Interval the job survives
	// (≥ 1): one more within Interval fails it.
	MaxFailures int
	Interval    time.Duration // the sliding window the failures are counted in (> 0)
	Delay       time.Duration // wait before each restart (≥ 0)
}

// FailureRate restarts after Delay as long as no more than MaxFailures
// failures fell within the last Interval (Flink's failure-rate strategy:
// a failure counts while it is at most Interval older than the latest).
type FailureRate struct {
	cfg FailureRateConfig
	// recent are the times of the latest failures, oldest first; at most
	// MaxFailures+1 are kept.
	recent []time.Time
}

// NewFailureRate validates cfg and returns the strategy.
func NewFailureRate(cfg FailureRateConfig) (*FailureRate, error) {
	switch {
	case cfg.MaxFailures < 1:
		return nil, invalid("failure-rate restart: max failures %d per interval, must be at least 1", cfg.MaxFailures)
	case cfg.Interval <= 0:
		return nil, invalid("failure-rate restart: interval %v, must be positive", cfg.Interval)
	case cfg.Delay < 0:
		return nil, invalid("failure-rate restart: negative delay %v", cfg.Delay)
	}
	return &FailureRate{cfg: cfg}, nil
}

func (f *FailureRate) Next(failureTime time.Time) (time.Duration, bool) {
	f.recent = append(f.recent, failureTime)
	drop := 0
	for drop < len(f.recent) && failureTime.Sub(f.recent[drop]) > f.cfg.Interval {
		drop++
	}
	if over := len(f.recent) - drop - (f.cfg.MaxFailures + 1); over > 0 {
		drop += over
	}
	f.recent = append(f.recent[:0], f.recent[drop:]...)
	if len(f.recent) > f.cfg.MaxFailures {
		return 0, false
	}
	return f.cfg.Delay, true
}

func (f *FailureRate) Reset() { f.recent = f.recent[:0] }

var (
	_ RestartStrategy = NoRestart{}
	_ RestartStrategy = (*FixedDelay)(nil)
	_ RestartStrategy = (*ExponentialDelay)(nil)
	_ RestartStrategy = (*FailureRate)(nil)
)
