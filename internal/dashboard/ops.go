package dashboard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
)

// Bounds of the asynchronous operations the API keeps: memory is bounded
// by these, not by the requests.
const (
	// maxOperations is how many operations' outcomes are kept, for their
	// status to be polled; the oldest finished one is forgotten first.
	maxOperations = 64
	// maxRunning is how many operations may be in progress at once; more
	// are refused (429).
	maxRunning = 8
)

// Kinds of operations: a trigger ID is polled under its kind's path.
const (
	opSavepoint  = "savepoint" // a savepoint, or a stop with one
	opCheckpoint = "checkpoint"
)

// errTooMany refuses an operation beyond maxRunning.
var errTooMany = errors.New("too many operations in progress")

// operation is one asynchronous action: a savepoint, a stop with a
// savepoint, or a checkpoint. Its outcome is set once, before done is
// closed.
type operation struct {
	id   string
	kind string
	// stop: a stop with a savepoint (the job ends once it completed).
	stop bool
	done chan struct{}
	// Set before done closes.
	location     string // a savepoint's path
	checkpointID uint64
	err          error
}

// finished reports whether the operation ended, without blocking.
func (o *operation) finished() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// operations runs the API's actions, each in a goroutine of its own whose
// context ends when the server shuts down, and keeps their outcomes.
type operations struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	byID    map[string]*operation
	order   []*operation // oldest first
	running int
	closed  bool
}

func newOperations() *operations {
	ctx, cancel := context.WithCancel(context.Background())
	return &operations{ctx: ctx, cancel: cancel, byID: make(map[string]*operation)}
}

// start runs do in a new operation of kind and returns it, or errTooMany.
// An operation started once the server shut down fails at once.
func (s *operations) start(kind string, stop bool, do func(ctx context.Context, o *operation) error) (*operation, error) {
	o := &operation{id: newTriggerID(), kind: kind, stop: stop, done: make(chan struct{})}
	s.mu.Lock()
	if s.running >= maxRunning {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w (at most %d)", errTooMany, maxRunning)
	}
	s.running++
	s.keepLocked(o)
	closed := s.closed
	if !closed {
		s.wg.Add(1)
	}
	s.mu.Unlock()
	if closed {
		s.finish(o, errors.New("the dashboard is shutting down"))
		return o, nil
	}
	go func() {
		defer s.wg.Done()
		s.finish(o, do(s.ctx, o))
	}()
	return o, nil
}

func (s *operations) finish(o *operation, err error) {
	o.err = err
	close(o.done)
	s.mu.Lock()
	s.running--
	s.mu.Unlock()
}

// keepLocked records o, forgetting the oldest finished operation beyond
// maxOperations (those in progress are kept: at most maxRunning).
func (s *operations) keepLocked(o *operation) {
	s.byID[o.id] = o
	s.order = append(s.order, o)
	for i := 0; len(s.order) > maxOperations && i < len(s.order); {
		if old := s.order[i]; old.finished() {
			delete(s.byID, old.id)
			s.order = append(s.order[:i], s.order[i+1:]...)
			continue
		}
		i++
	}
}

// get returns the operation of kind with id.
func (s *operations) get(kind, id string) (*operation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.byID[id]
	if !ok || o.kind != kind {
		return nil, false
	}
	return o, true
}

// close ends the operations in progress (their contexts end) and waits
// for their goroutines.
func (s *operations) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// newTriggerID returns 32 random hex digits, as Flink's trigger IDs.
func newTriggerID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}
