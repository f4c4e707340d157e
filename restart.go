package weir

import (
	"errors"
	"time"

	"github.com/weirstream/weir/coordinator"
)

// RestartStrategy decides whether and when a failed job restarts from its
// latest completed checkpoint (WithRestartStrategy). The constructors are
// Flink's strategies: FixedDelayRestart, ExponentialDelayRestart,
// FailureRateRestart and NoRestart; any implementation of the two methods
// works too. A strategy holds the failure history of one job: the job
// calls Reset when it starts, so do not share one between jobs that run
// at the same time.
type RestartStrategy interface {
	// Next records a failure at failureTime and returns how long to wait
	// before restarting, or ok=false if the job must fail.
	Next(failureTime time.Time) (delay time.Duration, ok bool)
	// Reset forgets past failures.
	Reset()
}

// FixedDelayRestart restarts a failed job up to attempts times, each after
// delay (Flink's fixed-delay strategy); the job fails at the failure after
// the last attempt. attempts must be at least 1 and delay not negative,
// or Execute returns an error.
func FixedDelayRestart(attempts int, delay time.Duration) RestartStrategy {
	s, err := coordinator.NewFixedDelay(coordinator.FixedDelayConfig{Attempts: attempts, Delay: delay})
	if err != nil {
		return invalidRestart{err}
	}
	return s
}

// FailureRateRestart restarts a failed job after delay as long as at most
// maxFailures failures happened within the last interval (Flink's
// failure-rate strategy); one more within interval fails the job.
// maxFailures must be at least 1, interval positive and delay not
// negative, or Execute returns an error.
func FailureRateRestart(maxFailures int, interval, delay time.Duration) RestartStrategy {
	s, err := coordinator.NewFailureRate(coordinator.FailureRateConfig{MaxFailures: maxFailures, Interval: interval, Delay: delay})
	if err != nil {
		return invalidRestart{err}
	}
	return s
}

// ExponentialDelayConfig configures ExponentialDelayRestart. Zero values
// mean Flink's defaults, except Jitter.
type ExponentialDelayConfig struct {
	// Initial is the first delay (default 1 s).
	Initial time.Duration
	// Max caps the delay (default 5 min).
	Max time.Duration
	// Multiplier is the delay's growth per failure, at least 1 (default
	// 1.5).
	Multiplier float64
	// Jitter is the fraction (0 to 1) by which each delay is moved up or
	// down at random; 0 means none (Flink's default is 0.1).
	Jitter float64
	// ResetAfter is the quiet period after which the delay starts over at
	// Initial, counted from the end of the previous delay (default 1 h).
	ResetAfter time.Duration
	// Attempts bounds the restarts between two resets (0: unlimited).
	Attempts int
}

// ExponentialDelayRestart restarts a failed job after a delay that starts
// at c.Initial and grows by c.Multiplier with every failure, up to c.Max,
// and starts over after a quiet period of c.ResetAfter (Flink's
// exponential-delay strategy). A bad value of c is an error from Execute.
func ExponentialDelayRestart(c ExponentialDelayConfig) RestartStrategy {
	s, err := coordinator.NewExponentialDelay(coordinator.ExponentialDelayConfig{Initial: c.Initial, Max: c.Max,
		Multiplier: c.Multiplier, Jitter: c.Jitter, ResetAfter: c.ResetAfter, Attempts: c.Attempts})
	if err != nil {
		return invalidRestart{err}
	}
	return s
}

// NoRestart never restarts: the job fails at its first failure (Flink's
// "none").
func NoRestart() RestartStrategy { return coordinator.NoRestart{} }

// invalidRestart is a strategy built from bad values: Execute reports err.
type invalidRestart struct{ err error }

func (invalidRestart) Next(time.Time) (time.Duration, bool) { return 0, false }
func (invalidRestart) Reset()                               {}

// WithRestartStrategy sets how a failed job restarts from its latest
// completed checkpoint. It needs WithCheckpointing: without checkpoints a
// job never restarts. The default is FixedDelayRestart(10, 100*time.Millisecond).
func WithRestartStrategy(s RestartStrategy) Option {
	if s == nil {
		return bad("weir: nil restart strategy")
	}
	if ir, ok := s.(invalidRestart); ok {
		return bad("weir: restart strategy: %w", ir.err)
	}
	return optionFunc(func(cfg *config) { cfg.restart = s })
}

var errRestartWithoutCheckpoints = errors.New("weir: WithRestartStrategy needs WithCheckpointing: without checkpoints a failed job does not restart")
