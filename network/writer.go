package network

import (
	"fmt"

	"github.com/weirstream/weir/internal/keygroup"
)

// Partitioning says how a producer spreads records over its consumers.
type Partitioning uint8

const (
	// Forward sends subtask i's records to subtask i (equal parallelism).
	Forward Partitioning = iota
	// Rebalance sends records round robin to every consumer.
	Rebalance
	// Hash sends each record to the consumer owning its key's key group.
	Hash
	// Broadcast sends every record to every consumer.
	Broadcast
)

func (p Partitioning) String() string {
	switch p {
	case Forward:
		return "forward"
	case Rebalance:
		return "rebalance"
	case Hash:
		return "hash"
	case Broadcast:
		return "broadcast"
	}
	return fmt.Sprintf("Partitioning(%d)", uint8(p))
}

// RecordWriter serializes records of type T into a ResultPartition,
// choosing subpartitions by its Partitioning. Only the producing task's
// goroutine uses it. Emit does no allocation, locking or channel send per
// record.
type RecordWriter[T any] struct {
	p        *ResultPartition
	appendFn func([]byte, T) []byte
	mode     Partitioning
	hash     func(T) uint64 // Hash only
	maxPar   int
	forward  int // Forward: the one subpartition
}

// WriterConfig configures a RecordWriter.
type WriterConfig[T any] struct {
	Partitioning Partitioning
	// Append encodes a record (append semantics), e.g. a codec's Append.
	Append func([]byte, T) []byte
	// KeyHash returns the hash of a record's key (Hash only).
	KeyHash func(T) uint64
	// MaxParallelism is the number of key groups (Hash only; default 128).
	MaxParallelism int
	// Subtask is the producing subtask's index (Forward only: it writes to
	// the subpartition of the same index when the partition has several).
	Subtask int
}

// NewRecordWriter returns a writer into p.
func NewRecordWriter[T any](p *ResultPartition, cfg WriterConfig[T]) (*RecordWriter[T], error) {
	if cfg.Append == nil {
		return nil, fmt.Errorf("network: record writer for %s: no encoder", p.name)
	}
	w := &RecordWriter[T]{p: p, appendFn: cfg.Append, mode: cfg.Partitioning, hash: cfg.KeyHash, maxPar: cfg.MaxParallelism}
	switch cfg.Partitioning {
	case Forward:
		if p.NumSubpartitions() > 1 {
			w.forward = cfg.Subtask
		}
		if w.forward < 0 || w.forward >= p.NumSubpartitions() {
			return nil, fmt.Errorf("network: forward writer for %s: subtask %d outside %d subpartitions", p.name, cfg.Subtask, p.NumSubpartitions())
		}
	case Hash:
		if cfg.KeyHash == nil {
			return nil, fmt.Errorf("network: hash writer for %s: no key hash", p.name)
		}
		if w.maxPar == 0 {
			w.maxPar = keygroup.DefaultMaxParallelism
		}
		if err := keygroup.Validate(w.maxPar, p.NumSubpartitions()); err != nil {
			return nil, fmt.Errorf("network: hash writer for %s: %w", p.name, err)
		}
	case Rebalance, Broadcast:
	default:
		return nil, fmt.Errorf("network: writer for %s: unknown partitioning %d", p.name, cfg.Partitioning)
	}
	return w, nil
}

// Partition is the partition written to.
func (w *RecordWriter[T]) Partition() *ResultPartition { return w.p }

// Emit serializes v into the subpartition its partitioning selects. It
// blocks while the partition's pool is empty (back pressure) and fails
// when the partition's context is cancelled.
func (w *RecordWriter[T]) Emit(v T) error {
	switch w.mode {
	case Forward:
		return AppendRecord(w.p, w.forward, w.appendFn, v)
	case Hash:
		g := keygroup.ForHash(w.hash(v), w.maxPar)
		return AppendRecord(w.p, keygroup.Operator(g, w.maxPar, len(w.p.subs)), w.appendFn, v)
	case Rebalance:
		i := w.p.rr
		w.p.rr++
		if w.p.rr == len(w.p.subs) {
			w.p.rr = 0
		}
		return AppendRecord(w.p, i, w.appendFn, v)
	default: // Broadcast
		for i := range w.p.subs {
			if err := AppendRecord(w.p, i, w.appendFn, v); err != nil {
				return err
			}
		}
		return nil
	}
}
