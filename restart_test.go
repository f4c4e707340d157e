package weir_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/coordinator"
)

// failingJob is a checkpointed job whose every attempt fails at its first
// record.
func failingJob(opts ...weir.Option) *weir.Environment {
	env := weir.NewEnvironment(append([]weir.Option{weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour})}, opts...)...)
	weir.Discard(weir.MapErr(weir.FromSlice(env, []int64{1, 2, 3}), func(v int64) (int64, error) {
		return 0, errors.New("always")
	}))
	return env
}

// Each of the root package's restart strategies, as Flink defines it,
// decides how many times the job restarts before it fails for good.
func TestRestartStrategies(t *testing.T) {
	for _, tc := range []struct {
		name     string
		s        weir.RestartStrategy
		restarts int
	}{
		{"fixed delay", weir.FixedDelayRestart(3, time.Millisecond), 3},
		{"failure rate", weir.FailureRateRestart(2, time.Hour, 0), 2},
		{"exponential delay", weir.ExponentialDelayRestart(weir.ExponentialDelayConfig{Initial: time.Millisecond, Attempts: 4}), 4},
		{"none", weir.NoRestart(), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Twice with the same strategy value: each job starts with a
			// clean failure history.
			for range 2 {
				res, err := failingJob(weir.WithRestartStrategy(tc.s)).Execute(testCtx(t))
				require.ErrorContains(t, err, "will not restart")
				require.ErrorContains(t, err, "always")
				require.Equal(t, tc.restarts, res.Restarts)
			}
		})
	}
}

// A strategy built from bad values, a nil one, or one without
// checkpointing is an error from Execute, before the job runs.
func TestRestartStrategyValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  weir.Option
		want string
	}{
		{"no attempts", weir.WithRestartStrategy(weir.FixedDelayRestart(0, time.Second)), "attempts 0"},
		{"negative delay", weir.WithRestartStrategy(weir.FixedDelayRestart(1, -time.Second)), "negative delay"},
		{"no failures", weir.WithRestartStrategy(weir.FailureRateRestart(0, time.Minute, 0)), "max failures 0"},
		{"no interval", weir.WithRestartStrategy(weir.FailureRateRestart(1, 0, 0)), "interval 0s"},
		{"multiplier", weir.WithRestartStrategy(weir.ExponentialDelayRestart(weir.ExponentialDelayConfig{Multiplier: 0.5})), "multiplier 0.5"},
		{"nil", weir.WithRestartStrategy(nil), "nil restart strategy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := failingJob(tc.opt).Execute(testCtx(t))
			require.ErrorContains(t, err, tc.want)
			if tc.name != "nil" {
				require.ErrorIs(t, err, coordinator.ErrInvalidConfig)
			}
		})
	}
	env := weir.NewEnvironment(weir.WithRestartStrategy(weir.FixedDelayRestart(1, 0)))
	weir.Discard(weir.FromSlice(env, []int64{1}))
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, "WithRestartStrategy needs WithCheckpointing")
}
