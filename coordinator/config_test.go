package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
)

func TestConfigDefaults(t *testing.T) {
	var c Config
	require.NoError(t, c.Validate())
	d := c.withDefaults()
	require.Equal(t, time.Duration(0), d.Interval)
	require.Equal(t, barrier.ExactlyOnce, d.Mode)
	require.Equal(t, time.Duration(0), d.MinPause)
	require.Equal(t, 10*time.Minute, d.Timeout)
	require.Equal(t, 1, d.MaxConcurrent)
	require.Equal(t, 0, d.TolerableFailures)
	require.Equal(t, 1, d.Retained)
	require.Equal(t, 10, d.HistorySize)
	require.Equal(t, barrier.Options{Kind: barrier.Checkpoint, Alignment: barrier.Aligned}, d.checkpointOptions())
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"periodic", Config{Interval: time.Second, MinPause: 500 * time.Millisecond, Timeout: time.Minute}, true},
		{"unaligned", Config{Unaligned: true, AlignedTimeout: time.Second}, true},
		{"at least once", Config{Mode: barrier.AtLeastOnce}, true},
		{"negative interval", Config{Interval: -time.Second}, false},
		{"interval below minimum", Config{Interval: time.Millisecond}, false},
		{"unknown mode", Config{Mode: 7}, false},
		{"negative min pause", Config{MinPause: -1}, false},
		{"negative timeout", Config{Timeout: -1}, false},
		{"timeout below minimum", Config{Timeout: time.Millisecond}, false},
		{"timeout below min pause", Config{Timeout: time.Second, MinPause: 2 * time.Second}, false},
		{"default timeout below min pause", Config{MinPause: time.Hour}, false},
		{"negative max concurrent", Config{MaxConcurrent: -1}, false},
		{"negative tolerable", Config{TolerableFailures: -1}, false},
		{"retained below 1", Config{Retained: -1}, false},
		{"unaligned at least once", Config{Unaligned: true, Mode: barrier.AtLeastOnce}, false},
		{"negative aligned timeout", Config{Unaligned: true, AlignedTimeout: -1}, false},
		{"aligned timeout without unaligned", Config{AlignedTimeout: time.Second}, false},
		{"negative history", Config{HistorySize: -1}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrInvalidConfig)
			}
		})
	}
}
