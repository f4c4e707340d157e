package network

import (
	"errors"
	"fmt"
	"sync"

	"github.com/google/uuid"
)

// ErrPartitionExists is returned by PartitionManager.Register for a
// partition ID that is already registered.
var ErrPartitionExists = errors.New("network: partition already registered")

// ErrUnknownPartition is returned by PartitionManager methods for a
// partition ID that is not registered.
var ErrUnknownPartition = errors.New("network: unknown partition")

// PartitionManager is the registry of the result partitions a worker
// serves over TCP (Flink's ResultPartitionManager): a Server looks up the
// subpartition a PARTITION_REQUEST names here. It is safe for concurrent
// use.
//
// A partition is registered as a list of subpartitions under one ID:
// usually those of one ResultPartition (Register), but a producer that
// fills every subpartition from its own pool may register subpartitions of
// several single-subpartition partitions under one ID
// (RegisterSubpartitions).
type PartitionManager struct {
	mu struct {
		sync.Mutex
		parts map[uuid.UUID]*servedPartition
	}
}

// servedPartition is one registered partition and what the server did
// with it. Guarded by the manager's mu.
type servedPartition struct {
	id      uuid.UUID
	subs    []*Subpartition
	failed  error
	readers map[*serverReader]struct{} // active readers
	conns   map[*serverConn]int        // open connections that attached a reader → count
	ended   []bool                     // end of partition sent, per subpartition
	gone    []bool                     // reader released without end of partition (cannot be read again)
	nEnded  int
	nGone   int
	done    chan struct{} // closed once every subpartition ended or was abandoned and no reading connection is open
	closed  bool
}

// NewPartitionManager returns an empty registry.
func NewPartitionManager() *PartitionManager {
	m := &PartitionManager{}
	m.mu.parts = make(map[uuid.UUID]*servedPartition)
	return m
}

// Register makes p's subpartitions available under p.ID(). It fails with
// ErrPartitionExists (wrapped) if the ID is taken.
func (m *PartitionManager) Register(p *ResultPartition) error {
	subs := make([]*Subpartition, p.NumSubpartitions())
	for i := range subs {
		subs[i] = p.Subpartition(i)
	}
	return m.RegisterSubpartitions(p.ID(), subs)
}

// RegisterSubpartitions makes subs available as subpartitions 0, 1, … of
// partition id. It fails with ErrPartitionExists (wrapped) if the ID is
// taken, and if subs is empty.
func (m *PartitionManager) RegisterSubpartitions(id uuid.UUID, subs []*Subpartition) error {
	if len(subs) == 0 {
		return fmt.Errorf("network: partition %s: no subpartitions", id)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.mu.parts[id]; ok {
		return fmt.Errorf("%w: %s", ErrPartitionExists, id)
	}
	m.mu.parts[id] = &servedPartition{
		id: id, subs: append([]*Subpartition(nil), subs...),
		readers: make(map[*serverReader]struct{}), conns: make(map[*serverConn]int),
		ended: make([]bool, len(subs)), gone: make([]bool, len(subs)), done: make(chan struct{}),
	}
	return nil
}

// Unregister removes partition id; requests for it then get "partition
// not found". Readers already serving it are not affected. Unregistering
// an unknown ID does nothing.
func (m *PartitionManager) Unregister(id uuid.UUID) {
	m.mu.Lock()
	delete(m.mu.parts, id)
	m.mu.Unlock()
}

// Fail marks partition id as failed (its producer failed): every reader
// of it gets ERROR_RESPONSE (class "producer failed") carrying err's text
// and is released, and later requests for it get the same answer. It
// fails with ErrUnknownPartition (wrapped) if id is not registered.
func (m *PartitionManager) Fail(id uuid.UUID, err error) error {
	if err == nil {
		err = errors.New("producer failed")
	}
	m.mu.Lock()
	sp, ok := m.mu.parts[id]
	if !ok {
		m.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrUnknownPartition, id)
	}
	if sp.failed == nil {
		sp.failed = err
	}
	readers := make([]*serverReader, 0, len(sp.readers))
	for r := range sp.readers {
		readers = append(readers, r)
	}
	clear(sp.readers)
	m.mu.Unlock()
	for _, r := range readers {
		r.conn.failReader(r, sp.failed)
	}
	return nil
}

// Done returns a channel that is closed once every subpartition of id
// has either sent its end of partition or lost its reader before that
// (cancelled, failed, connection lost: a subpartition is read once, so it
// can never complete), and every connection that read any of them has
// closed: the producer may then go away. Progress tells which of the two
// happened. It fails with ErrUnknownPartition (wrapped) if id is not
// registered.
func (m *PartitionManager) Done(id uuid.UUID) (<-chan struct{}, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sp, ok := m.mu.parts[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownPartition, id)
	}
	return sp.done, nil
}

// Progress returns how many subpartitions of id sent their end of
// partition (ended) and how many lost their reader before that
// (abandoned). It fails with ErrUnknownPartition (wrapped) if id is not
// registered.
func (m *PartitionManager) Progress(id uuid.UUID) (ended, abandoned int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sp, ok := m.mu.parts[id]
	if !ok {
		return 0, 0, fmt.Errorf("%w: %s", ErrUnknownPartition, id)
	}
	return sp.nEnded, sp.nGone, nil
}

// lookup finds the subpartition of a request. It returns the partition
// (nil if unknown), the subpartition (nil if out of range) and the
// partition's failure.
func (m *PartitionManager) lookup(id uuid.UUID, sub uint32) (*servedPartition, *Subpartition, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sp, ok := m.mu.parts[id]
	if !ok {
		return nil, nil, nil
	}
	if uint64(sub) >= uint64(len(sp.subs)) {
		return sp, nil, sp.failed
	}
	return sp, sp.subs[sub], sp.failed
}

// addReader records r as an active reader of sp. It returns sp's failure
// (and records nothing) if sp failed meanwhile.
func (m *PartitionManager) addReader(sp *servedPartition, r *serverReader) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sp.failed != nil {
		return sp.failed
	}
	sp.readers[r] = struct{}{}
	sp.conns[r.conn]++
	return nil
}

// readerEnd says how a reader went away.
type readerEnd uint8

const (
	readerEnded       readerEnd = iota + 1 // sent its end of partition
	readerAbandoned                        // released before it
	readerNotAttached                      // never attached: the subpartition is untouched
)

// removeReader forgets r.
func (m *PartitionManager) removeReader(r *serverReader, how readerEnd) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sp := r.part
	delete(sp.readers, r)
	switch i := r.subIndex; {
	case how == readerNotAttached || sp.ended[i] || sp.gone[i]:
	case how == readerEnded:
		sp.ended[i] = true
		sp.nEnded++
	default:
		sp.gone[i] = true
		sp.nGone++
	}
	m.checkDoneLocked(sp)
}

// connClosed forgets connection c for every partition it read.
func (m *PartitionManager) connClosed(c *serverConn, parts []*servedPartition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, sp := range parts {
		delete(sp.conns, c)
		m.checkDoneLocked(sp)
	}
}

func (m *PartitionManager) checkDoneLocked(sp *servedPartition) {
	if !sp.closed && sp.nEnded+sp.nGone == len(sp.subs) && len(sp.conns) == 0 {
		sp.closed = true
		close(sp.done)
	}
}
