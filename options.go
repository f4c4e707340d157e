package weir

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/network/debloat"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// config is an Environment's settings; zero values mean defaults.
type config struct {
	parallelism      int
	maxParallelism   int
	bufferTimeout    time.Duration
	bufferTimeoutSet bool
	segmentSize      int
	numSegments      int
	exclusive        int
	floating         int
	maxRecordSize    int
	logger           *zap.Logger
	chaining         bool
	tcp              bool
	ckpt             *CheckpointConfig
	restart          RestartStrategy
	restoreFrom      string
	allowNonRestored bool
	jobID            string
	cluster          *ClusterConfig
	debloat          *DebloatConfig
	stateBackend     StateBackend // nil: the default, see backend
	// watermarkInterval is how often watermark generators emit
	// periodically (0: never).
	watermarkInterval time.Duration
	metrics           metricsConfig
	harness           TestHarness // nil: none (WithTestHarness)
	errs              []error
}

func defaultConfig() config {
	return config{
		parallelism:    1,
		maxParallelism: keygroup.DefaultMaxParallelism,
		bufferTimeout:  task.DefaultBufferTimeout,
		segmentSize:    buffer.DefaultSegmentSize,
		numSegments:    buffer.DefaultNumSegments,
		exclusive:      2,
		floating:       8,
		logger:         zap.NewNop(),
		chaining:       true,

		watermarkInterval: 200 * time.Millisecond,
		metrics:           defaultMetricsConfig(),
	}
}

func (c *config) validate() error {
	if len(c.errs) > 0 {
		return c.errs[0]
	}
	if err := keygroup.Validate(c.maxParallelism, c.parallelism); err != nil {
		return fmt.Errorf("weir: %w", err)
	}
	if err := (buffer.Config{SegmentSize: c.segmentSize, NumSegments: c.numSegments}).Validate(); err != nil {
		return fmt.Errorf("weir: %w", err)
	}
	if c.exclusive < 1 {
		return fmt.Errorf("weir: exclusive buffers per channel %d must be at least 1", c.exclusive)
	}
	if c.floating < 0 {
		return fmt.Errorf("weir: floating buffers per gate %d must not be negative", c.floating)
	}
	if c.bufferTimeout < 0 {
		return fmt.Errorf("weir: buffer timeout %v must not be negative", c.bufferTimeout)
	}
	if c.maxRecordSize < 0 {
		return fmt.Errorf("weir: max record size %d must not be negative", c.maxRecordSize)
	}
	if c.ckpt != nil {
		if err := c.ckpt.validate(); err != nil {
			return err
		}
	}
	if err := c.metrics.validate(); err != nil {
		return err
	}
	if d := c.debloat; d != nil {
		if err := (debloat.Config{Target: d.Target, Period: d.Period, Samples: d.Samples, Threshold: d.Threshold,
			MinSize: d.MinSize, MaxSize: c.segmentSize}).Validate(); err != nil {
			return fmt.Errorf("weir: buffer debloating: %w", err)
		}
	}
	if err := c.backend().validate(); err != nil {
		return err
	}
	if c.restart != nil && c.ckpt == nil {
		return errRestartWithoutCheckpoints
	}
	if c.jobID != "" {
		if err := state.ValidJobID(c.jobID); err != nil {
			return fmt.Errorf("weir: WithJobID: %w", err)
		}
	}
	if c.restoreFrom != "" && c.ckpt == nil {
		return errors.New("weir: WithRestoreFrom needs WithCheckpointing")
	}
	if c.cluster != nil {
		if c.ckpt == nil {
			return errors.New("weir: WithCluster needs WithCheckpointing")
		}
		if err := c.cluster.validate(); err != nil {
			return err
		}
		if c.harness != nil {
			return errors.New("weir: WithTestHarness runs jobs in this process only, not with WithCluster")
		}
	}
	return nil
}

// Option configures an Environment.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

func bad(format string, args ...any) optionFunc {
	err := fmt.Errorf(format, args...)
	return func(c *config) { c.errs = append(c.errs, err) }
}

// WithParallelism sets the default parallelism of every operator (default
// 1). It must lie in [1, max parallelism].
func WithParallelism(n int) Option {
	if n < 1 {
		return bad("weir: parallelism %d must be at least 1", n)
	}
	return optionFunc(func(c *config) { c.parallelism = n })
}

// WithMaxParallelism sets the number of key groups (default 128): the
// upper bound of any keyed operator's parallelism, fixed for the life of
// the job's state.
func WithMaxParallelism(n int) Option {
	return optionFunc(func(c *config) { c.maxParallelism = n })
}

// WithBufferTimeout sets how long a partially filled buffer may wait before
// it is sent (default 100 ms; 0 sends after every record: lowest latency,
// lowest throughput).
func WithBufferTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.bufferTimeout = d; c.bufferTimeoutSet = true })
}

// WithSegmentSize sets the network buffer size in bytes (default 32 KiB).
func WithSegmentSize(n int) Option {
	if n <= 0 {
		return bad("weir: segment size %d must be positive", n)
	}
	return optionFunc(func(c *config) { c.segmentSize = n })
}

// WithNetworkSegments bounds the network memory: the number of segments
// (default 2048, i.e. 64 MiB of 32 KiB segments, allocated on demand).
func WithNetworkSegments(n int) Option {
	if n <= 0 {
		return bad("weir: network segments %d must be positive", n)
	}
	return optionFunc(func(c *config) { c.numSegments = n })
}

// WithExclusiveBuffers sets the buffers each input channel owns (default 2).
func WithExclusiveBuffers(n int) Option {
	return optionFunc(func(c *config) { c.exclusive = n })
}

// WithFloatingBuffers sets the buffers each input gate shares among its
// channels (default 8).
func WithFloatingBuffers(n int) Option {
	return optionFunc(func(c *config) { c.floating = n })
}

// WithMaxRecordSize bounds one serialized record (default 64 MiB); a larger
// length prefix on the wire is treated as corruption.
func WithMaxRecordSize(n int) Option {
	return optionFunc(func(c *config) { c.maxRecordSize = n })
}

// WithLogger sets the logger (nil: silent).
func WithLogger(l *zap.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			l = zap.NewNop()
		}
		c.logger = l
	})
}

// WithChaining turns operator chaining on (default) or off. Without
// chaining every operator runs in its own task and records are serialized
// between all of them.
func WithChaining(on bool) Option {
	return optionFunc(func(c *config) { c.chaining = on })
}

// WithAutoWatermarkInterval sets how often the watermark generators of
// AssignTimestamps emit periodically (default 200 ms, as Flink's
// pipeline.auto-watermark-interval); 0 turns periodic emission off, so
// that only generators that emit on events make progress.
func WithAutoWatermarkInterval(d time.Duration) Option {
	if d < 0 {
		return bad("weir: auto watermark interval %v must not be negative", d)
	}
	return optionFunc(func(c *config) { c.watermarkInterval = d })
}

// WithTCPExchanges makes every exchange between tasks go over loopback TCP
// (default off: tasks of one process hand buffers over in memory). The job
// then serves its partitions with weir's TCP server on 127.0.0.1 and reads
// them with its TCP client, remote channels and credit-based flow control
// (docs/protocol.md): exactly the path of a job spread over several processes.
// Each input gate additionally takes its exclusive and floating receive
// buffers (WithExclusiveBuffers, WithFloatingBuffers) from the network
// segments. Use it to test and benchmark the remote path; it is slower than
// the in-memory exchange.
func WithTCPExchanges(on bool) Option {
	return optionFunc(func(c *config) { c.tcp = on })
}

// DebloatConfig configures buffer debloating (WithBufferDebloating). Zero
// values mean Flink's defaults.
type DebloatConfig struct {
	// Target is how long the data in flight on a task's input should take
	// to drain (default 1 s): the less in flight, the faster an aligned
	// barrier gets through and the smaller an unaligned checkpoint.
	Target time.Duration
	// Period is how often a task measures its input's throughput (default
	// 200 ms).
	Period time.Duration
	// Samples is the length of the moving average of the buffer size
	// (default 20 periods).
	Samples int
	// Threshold is the least change of the buffer size, in percent, that
	// is sent to the producers (default 25).
	Threshold int
	// MinSize is the smallest buffer size (default 256 bytes).
	MinSize int
}

// WithBufferDebloating turns buffer debloating on (Flink's
// taskmanager.network.memory.buffer-debloat.enabled; default off): every
// task measures how fast it consumes its input and has its producers cut
// their buffers (NEW_BUFFER_SIZE over TCP) so that the data in flight
// drains in the target time. It costs a little throughput when buffers
// get small (more buffers per record), and keeps checkpoints fast under
// back pressure without the network memory shrinking.
func WithBufferDebloating(c DebloatConfig) Option {
	return optionFunc(func(cfg *config) { cfg.debloat = &c })
}

func (c *config) debloatConfig() *debloat.Config {
	d := c.debloat
	if d == nil {
		return nil
	}
	return &debloat.Config{Target: d.Target, Period: d.Period, Samples: d.Samples, Threshold: d.Threshold, MinSize: d.MinSize}
}
