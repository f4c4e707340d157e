package weir

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
	"github.com/weirstream/weir/state/pebble"
)

// StateBackend is where a job's keyed state lives while it runs: in the
// heap (HeapBackend, the default) or in an embedded LSM on local disk
// (PebbleBackend). Checkpoints and savepoints of both have the same format
// unless incremental, so a job can switch backends across a restore.
type StateBackend interface {
	// factory returns the creator of one keyed operator's backend.
	factory(log *zap.Logger) func(maxPar, par, index int) (state.KeyedBackend, error)
	validate() error
}

// backend is the job's state backend: the one WithStateBackend set, or
// the default, HeapBackend. This is the only place the default is
// decided; the runtime below (internal/deploy, task) requires a factory.
func (c *config) backend() StateBackend {
	if c.stateBackend == nil {
		return HeapBackend()
	}
	return c.stateBackend
}

// HeapBackend keeps keyed state in memory, in Go maps with copy-on-write
// snapshots: the fastest, for state that fits in memory. It is the
// default.
func HeapBackend() StateBackend { return heapBackend{} }

type heapBackend struct{}

func (heapBackend) validate() error { return nil }

func (heapBackend) factory(log *zap.Logger) func(maxPar, par, index int) (state.KeyedBackend, error) {
	return func(maxPar, par, index int) (state.KeyedBackend, error) {
		return heap.New(heap.Config{MaxParallelism: maxPar, Parallelism: par, Index: index, Logger: log})
	}
}

// PebbleOptions configures PebbleBackend. Zero values mean the defaults.
type PebbleOptions struct {
	// Dir is the local directory under which each keyed operator's
	// subtask keeps its database, in a working directory of its own that
	// is removed when the task ends (default os.TempDir()). A directory
	// that cannot be created fails the task, which restarts per the job's
	// restart strategy.
	Dir string
	// BlockCacheSize bounds each database's block cache in bytes (default
	// 64 MiB).
	BlockCacheSize int64
	// MemTableSize is the size of each database's memtables (write
	// buffers) in bytes (default 64 MiB, two of them).
	MemTableSize uint64
	// CacheBytes bounds each database's write-back cache, in bytes of the
	// Go heap (default 64 MiB; negative: no cache): the values of value,
	// list, reducing and aggregating states, held and updated in memory
	// as the heap backend holds them, evicted to the database when cold
	// and written to it at each checkpoint. Map states are not cached.
	CacheBytes int64
	// DirtyBytes bounds the cache's entries not yet written to the
	// database (default a sixteenth of CacheBytes): beyond it they are
	// written, and stay cached. It bounds a checkpoint's synchronous
	// part.
	DirtyBytes int64
	// Incremental makes checkpoints incremental: each uploads only the
	// files no previous retained checkpoint uploaded. Savepoints are
	// always full.
	Incremental bool
}

// PebbleBackend keeps keyed state in an embedded pebble LSM database on
// local disk per keyed operator subtask (Flink's RocksDB backend): state
// larger than memory. A bounded write-back cache in front of each
// database keeps the hot keys' values in memory (PebbleOptions.CacheBytes);
// an access that misses it pays a read of the database.
func PebbleBackend(o PebbleOptions) StateBackend { return pebbleBackend{o} }

type pebbleBackend struct{ o PebbleOptions }

func (p pebbleBackend) config(log *zap.Logger, maxPar, par, index int) pebble.Config {
	return pebble.Config{
		MaxParallelism: maxPar, Parallelism: par, Index: index,
		Dir: p.o.Dir, BlockCacheSize: p.o.BlockCacheSize, MemTableSize: p.o.MemTableSize,
		CacheBytes: p.o.CacheBytes, DirtyBytes: p.o.DirtyBytes,
		Incremental: p.o.Incremental, Logger: log,
	}
}

func (p pebbleBackend) validate() error {
	if err := p.config(nil, 0, 0, 0).Validate(); err != nil {
		return fmt.Errorf("weir: state backend: %w", err)
	}
	return nil
}

func (p pebbleBackend) factory(log *zap.Logger) func(maxPar, par, index int) (state.KeyedBackend, error) {
	return func(maxPar, par, index int) (state.KeyedBackend, error) {
		return pebble.New(p.config(log, maxPar, par, index))
	}
}

// WithStateBackend sets where keyed state lives (default HeapBackend()).
func WithStateBackend(b StateBackend) Option {
	if b == nil {
		return bad("weir: nil state backend")
	}
	return optionFunc(func(c *config) { c.stateBackend = b })
}
