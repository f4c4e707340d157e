package coordinator

import (
	"errors"
	"fmt"
	"time"

	"github.com/weirstream/weir/barrier"
)

// Defaults applied to zero fields of Config (Flink's defaults).
const (
	DefaultTimeout       = 10 * time.Minute
	DefaultMaxConcurrent = 1
	DefaultRetained      = 1
	DefaultHistorySize   = 10 // Flink's web.checkpoints.history

	// MinInterval is the smallest allowed checkpoint interval and timeout
	// (Flink's MINIMAL_CHECKPOINT_TIME).
	MinInterval = 10 * time.Millisecond
)

// Config configures a CheckpointCoordinator. Zero values mean the documented
// defaults; Validate reports bad values (it never panics).
type Config struct {
	// Interval between periodic checkpoints. 0 turns periodic checkpointing
	// off (manual checkpoints and savepoints still work); otherwise at least
	// MinInterval.
	Interval time.Duration
	// Mode is the guarantee; the zero value is barrier.ExactlyOnce.
	Mode barrier.Mode
	// MinPause is the least time between the completion of one checkpoint
	// and the trigger of the next periodic one (0: none).
	MinPause time.Duration
	// Timeout aborts a checkpoint that is not complete this long after its
	// trigger. 0 means DefaultTimeout; otherwise at least MinInterval and at
	// least MinPause.
	Timeout time.Duration
	// MaxConcurrent is how many checkpoints may be in progress at once
	// (0 means DefaultMaxConcurrent). Savepoints are not held back by it.
	MaxConcurrent int
	// TolerableFailures is how many consecutive failed checkpoints the job
	// tolerates: the job fails when the count exceeds it, so 0 fails it at
	// the first failed checkpoint. Savepoint failures, and checkpoints
	// aborted for reasons outside the checkpoint (failover, shutdown, a
	// newer completed checkpoint, a trigger that could not be delivered) do
	// not count.
	TolerableFailures int
	// Retained is how many completed checkpoints are kept; older ones are
	// discarded (0 means DefaultRetained). Savepoints are never discarded.
	Retained int
	// RetainOnCancel keeps the retained checkpoints when the job is
	// canceled (Flink's RETAIN_ON_CANCELLATION); otherwise they are deleted
	// on cancel and kept only when the job fails terminally
	// (RETAIN_ON_FAILURE). A finished job always deletes them.
	RetainOnCancel bool
	// Unaligned makes exactly-once checkpoints unaligned. It requires
	// ExactlyOnce.
	Unaligned bool
	// AlignedTimeout, with Unaligned, starts each checkpoint aligned and
	// switches to unaligned after this long (0: unaligned from the start).
	AlignedTimeout time.Duration
	// HistorySize bounds the checkpoints Stats remembers (0 means
	// DefaultHistorySize).
	HistorySize int
}

// ErrInvalidConfig is wrapped by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("coordinator: invalid config")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// Validate reports the first bad value in c (errors wrap ErrInvalidConfig).
func (c Config) Validate() error {
	switch {
	case c.Interval < 0:
		return invalid("negative interval %v", c.Interval)
	case c.Interval > 0 && c.Interval < MinInterval:
		return invalid("interval %v below the minimum %v", c.Interval, MinInterval)
	case c.Mode != barrier.ExactlyOnce && c.Mode != barrier.AtLeastOnce:
		return invalid("unknown mode %v", c.Mode)
	case c.MinPause < 0:
		return invalid("negative min pause %v", c.MinPause)
	case c.Timeout < 0:
		return invalid("negative timeout %v", c.Timeout)
	case c.Timeout > 0 && c.Timeout < MinInterval:
		return invalid("timeout %v below the minimum %v", c.Timeout, MinInterval)
	case c.withDefaults().Timeout < c.MinPause:
		return invalid("timeout %v shorter than min pause %v", c.withDefaults().Timeout, c.MinPause)
	case c.MaxConcurrent < 0:
		return invalid("negative max concurrent checkpoints %d", c.MaxConcurrent)
	case c.TolerableFailures < 0:
		return invalid("negative tolerable failures %d", c.TolerableFailures)
	case c.Retained < 0:
		return invalid("retained checkpoints %d, must be at least 1", c.Retained)
	case c.Unaligned && c.Mode == barrier.AtLeastOnce:
		return invalid("unaligned checkpoints require exactly-once mode")
	case c.AlignedTimeout < 0:
		return invalid("negative aligned timeout %v", c.AlignedTimeout)
	case c.AlignedTimeout > 0 && !c.Unaligned:
		return invalid("aligned timeout %v requires unaligned checkpoints", c.AlignedTimeout)
	case c.HistorySize < 0:
		return invalid("negative history size %d", c.HistorySize)
	}
	return nil
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
	}
	if c.Retained == 0 {
		c.Retained = DefaultRetained
	}
	if c.HistorySize == 0 {
		c.HistorySize = DefaultHistorySize
	}
	return c
}

// checkpointOptions are the barrier options of a regular checkpoint.
// Savepoints are always aligned (as in Flink).
func (c Config) checkpointOptions() barrier.Options {
	switch {
	case c.Unaligned && c.AlignedTimeout > 0:
		return barrier.Options{Kind: barrier.Checkpoint, Alignment: barrier.AlignedWithTimeout, AlignmentTimeout: c.AlignedTimeout}
	case c.Unaligned:
		return barrier.Options{Kind: barrier.Checkpoint, Alignment: barrier.Unaligned}
	}
	return barrier.Options{Kind: barrier.Checkpoint, Alignment: barrier.Aligned}
}
