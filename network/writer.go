package network

import (
	"encoding/binary"
	"fmt"
	"unsafe"

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
	groupSub []int32  // Hash: key group -> subpartition (keygroup.Operator)
	forward  *builder // Forward: the one subpartition's builder

	// With KeyGroupPrefix, appendFn is appendGrouped, which writes group
	// (the key group of the record being emitted) and then userAppend's
	// encoding.
	userAppend func([]byte, T) []byte
	group      int
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
	// KeyGroupPrefix (Hash only) writes each record's key group, two bytes
	// big-endian, before its encoding, so that the consumer reads the key
	// group rather than hashing the key again. The key is then hashed even
	// when there is a single consumer.
	KeyGroupPrefix bool
}

// NewRecordWriter returns a writer into p.
func NewRecordWriter[T any](p *ResultPartition, cfg WriterConfig[T]) (*RecordWriter[T], error) {
	if cfg.Append == nil {
		return nil, fmt.Errorf("network: record writer for %s: no encoder", p.name)
	}
	if cfg.KeyGroupPrefix && cfg.Partitioning != Hash {
		return nil, fmt.Errorf("network: %s writer for %s: key group prefix without hash partitioning", cfg.Partitioning, p.name)
	}
	w := &RecordWriter[T]{p: p, appendFn: cfg.Append, mode: cfg.Partitioning, hash: cfg.KeyHash, maxPar: cfg.MaxParallelism}
	switch cfg.Partitioning {
	case Forward:
		sub := 0
		if p.NumSubpartitions() > 1 {
			sub = cfg.Subtask
		}
		if sub < 0 || sub >= p.NumSubpartitions() {
			return nil, fmt.Errorf("network: forward writer for %s: subtask %d outside %d subpartitions", p.name, cfg.Subtask, p.NumSubpartitions())
		}
		w.forward = &p.builders[sub]
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
		w.groupSub = make([]int32, w.maxPar)
		for g := range w.groupSub {
			w.groupSub[g] = int32(keygroup.Operator(g, w.maxPar, p.NumSubpartitions()))
		}
		if cfg.KeyGroupPrefix {
			w.userAppend = cfg.Append
			w.appendFn = w.appendGrouped
		} else if p.NumSubpartitions() == 1 {
			// Every key group goes to the one consumer: no key to hash.
			w.mode, w.forward = Forward, &p.builders[0]
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
	if b := w.forward; b != nil { // Forward, or Hash to a single consumer
		// builder.dst and builder.commit, inline: a record that fits in
		// the current buffer is encoded in place, its length prefix put
		// before it, and nothing else is stored but the position.
		if b.pos > b.limit {
			return appendSpanning(w.p, b, w.appendFn, v)
		}
		// Without bounds checks: at least lengthSize+fit bytes (fit >= 1)
		// are left from pos, so the slice points into seg.
		out := w.appendFn(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(b.seg)), b.pos+lengthSize)), len(b.seg)-b.pos-lengthSize)[:0], v)
		// The builder's fields are read again after the call, so that
		// only b is kept on the stack across it.
		pos, room := b.pos, len(b.seg)-b.pos-lengthSize
		p := unsafe.Add(unsafe.Pointer(unsafe.SliceData(b.seg)), pos)
		// Appended in place: append kept the slice's array. Anything
		// else (grown, or another slice) is copied the spanning way,
		// not encoded again.
		if n := len(out); unsafe.Pointer(unsafe.SliceData(out)) == unsafe.Add(p, lengthSize) && n <= room {
			binary.BigEndian.PutUint32((*[lengthSize]byte)(p)[:], uint32(n))
			b.pos = pos + lengthSize + n
			b.records++
			return nil
		}
		return b.part.writeEncoded(b, out)
	}
	return w.emit(v)
}

// emit is Emit for the partitionings that choose a builder per record.
func (w *RecordWriter[T]) emit(v T) error {
	var b *builder
	switch w.mode {
	case Hash:
		g := keygroup.ForHash(w.hash(v), w.maxPar)
		b = &w.p.builders[w.groupSub[g]]
		if w.userAppend != nil { // KeyGroupPrefix
			if dst, ok := b.dst(); ok && b.commit(w.userAppend(append(dst, byte(g>>8), byte(g)), v)) {
				return nil
			}
			w.group = g
			return appendSpanning(w.p, b, w.appendFn, v)
		}
	case Rebalance:
		p := w.p
		b = &p.builders[p.rr]
		if p.rr++; p.rr == len(p.builders) {
			p.rr = 0
		}
	default: // Broadcast
		for i := range w.p.subs {
			if err := AppendRecord(w.p, i, w.appendFn, v); err != nil {
				return err
			}
		}
		return nil
	}
	// AppendRecord, inline: a call less per record.
	if dst, ok := b.dst(); ok && b.commit(w.appendFn(dst, v)) {
		return nil
	}
	return appendSpanning(w.p, b, w.appendFn, v)
}

// appendGrouped appends the key group of the record being emitted, then
// the record (KeyGroupPrefix; Emit inlines it but for records that span
// buffers).
func (w *RecordWriter[T]) appendGrouped(dst []byte, v T) []byte {
	return w.userAppend(append(dst, byte(w.group>>8), byte(w.group)), v)
}

// KeyGroupPrefixLen is the length of the key group that
// WriterConfig.KeyGroupPrefix writes before each record.
const KeyGroupPrefixLen = 2

// KeyGroupOf returns the key group a KeyGroupPrefix writer put before
// record rec, and the record after it.
func KeyGroupOf(rec []byte) (group int, rest []byte, ok bool) {
	if len(rec) < KeyGroupPrefixLen {
		return 0, nil, false
	}
	return int(rec[0])<<8 | int(rec[1]), rec[KeyGroupPrefixLen:], true
}
