// Package debloat sizes network buffers so that the data in flight on an
// input gate drains in a target time (Flink's buffer debloating, FLIP-183).
//
// A Debloater is a pure core: no goroutines, clocks or I/O. Its driver,
// the task that owns the gate, calls Sample once per Config.Period with
// what the gate consumed during it, and when Sample says so sends the new
// size to every channel of the gate (NEW_BUFFER_SIZE over TCP, the
// subpartition directly in-process); the producers cut their next buffers
// at that size.
//
// The rule, for a sample of b bytes consumed in t of busy time (the time
// the task was not idle waiting for input) with n buffers in flight:
//
//	throughput = b / t
//	want       = throughput × Target / n        (the size that drains n buffers in Target)
//	size       = size + α (want − size)          (α = 2 / (Samples + 1): a moving average)
//	size       = clamp(size, MinSize, MaxSize)
//
// and the size is announced only when it differs from the last announced
// one by at least Threshold percent of it (the first sample always
// announces). A sample with no busy time or no buffer in flight changes
// nothing.
package debloat

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Defaults, as Flink's taskmanager.network.memory.buffer-debloat.*.
const (
	DefaultTarget    = time.Second
	DefaultPeriod    = 200 * time.Millisecond
	DefaultSamples   = 20
	DefaultThreshold = 25 // percent
	DefaultMinSize   = 256
)

// Config configures a Debloater. Zero values mean the defaults; MaxSize is
// required (the segment size).
type Config struct {
	// Target is how long the in-flight data should take to drain.
	Target time.Duration
	// Period is how often the driver samples (not used by the core, which
	// takes samples as they come).
	Period time.Duration
	// Samples is the length of the moving average, in samples.
	Samples int
	// Threshold is the least change, in percent of the announced size,
	// worth announcing.
	Threshold int
	// MinSize and MaxSize bound the size.
	MinSize, MaxSize int
}

// WithDefaults returns c with zero values replaced by the defaults.
func (c Config) WithDefaults() Config {
	if c.Target == 0 {
		c.Target = DefaultTarget
	}
	if c.Period == 0 {
		c.Period = DefaultPeriod
	}
	if c.Samples == 0 {
		c.Samples = DefaultSamples
	}
	if c.Threshold == 0 {
		c.Threshold = DefaultThreshold
	}
	if c.MinSize == 0 {
		c.MinSize = min(DefaultMinSize, c.MaxSize)
	}
	return c
}

// Validate reports a value out of range.
func (c Config) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.MaxSize <= 0:
		return errors.New("debloat: MaxSize (the segment size) is required")
	case c.Target < 0:
		return fmt.Errorf("debloat: negative target %v", c.Target)
	case c.Period < 0:
		return fmt.Errorf("debloat: negative period %v", c.Period)
	case c.Samples < 1:
		return fmt.Errorf("debloat: %d samples, need at least 1", c.Samples)
	case c.Threshold < 0 || c.Threshold > 100:
		return fmt.Errorf("debloat: threshold %d%% outside [0, 100]", c.Threshold)
	case c.MinSize < 1 || c.MinSize > c.MaxSize:
		return fmt.Errorf("debloat: min size %d outside [1, %d]", c.MinSize, c.MaxSize)
	}
	return nil
}

// Debloater is the buffer size of one input gate. Not safe for
// concurrent use.
type Debloater struct {
	cfg       Config
	alpha     float64
	size      float64 // the moving average
	announced int     // 0: nothing announced yet
}

// New returns a debloater starting at the maximum size. It returns an
// error if cfg is invalid.
func New(cfg Config) (*Debloater, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	return &Debloater{cfg: cfg, alpha: 2 / float64(cfg.Samples+1), size: float64(cfg.MaxSize)}, nil
}

// Size is the current size (the moving average, rounded), announced or
// not.
func (d *Debloater) Size() int { return int(math.Round(d.size)) }

// Sample takes what the gate consumed in the last period: bytes, in busy
// time, with buffers data buffers in flight (queued in its channels). It
// returns the buffer size to announce and true, or false when the size
// did not change enough to be worth announcing.
func (d *Debloater) Sample(bytes int64, busy time.Duration, buffers int) (size int, announce bool) {
	if busy <= 0 || buffers <= 0 || bytes < 0 {
		return d.announced, false
	}
	throughput := float64(bytes) / busy.Seconds() // bytes/s
	want := throughput * d.cfg.Target.Seconds() / float64(buffers)
	d.size += d.alpha * (want - d.size)
	d.size = min(max(d.size, float64(d.cfg.MinSize)), float64(d.cfg.MaxSize))
	size = d.Size()
	if d.announced != 0 && math.Abs(float64(size-d.announced)) < float64(d.announced)*float64(d.cfg.Threshold)/100 {
		return d.announced, false
	}
	d.announced = size
	return size, true
}
