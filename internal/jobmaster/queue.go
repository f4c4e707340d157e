package jobmaster

import "sync"

// serialQueue runs functions one at a time, in the order they were put,
// on a goroutine of its own, so that the caller of put never waits for
// them (a driver loop that must not block on the network). Unbounded:
// it carries control messages, a few per checkpoint and task.
type serialQueue struct {
	wake chan struct{} // buffered(1)
	done chan struct{} // closed when the goroutine returned
	mu   struct {
		sync.Mutex
		q      []func()
		closed bool
	}
}

func newSerialQueue() *serialQueue {
	s := &serialQueue{wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.loop()
	return s
}

// put queues f; it reports false, dropping f, once the queue is closed.
func (s *serialQueue) put(f func()) bool {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return false
	}
	s.mu.q = append(s.mu.q, f)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true
}

// close drops what was not started and waits for the running function.
// It is idempotent.
func (s *serialQueue) close() {
	s.mu.Lock()
	s.mu.closed = true
	s.mu.q = nil
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-s.done
}

func (s *serialQueue) loop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			return
		}
		var f func()
		if len(s.mu.q) > 0 {
			f = s.mu.q[0]
			s.mu.q[0] = nil
			s.mu.q = s.mu.q[1:]
		}
		s.mu.Unlock()
		if f != nil {
			f()
			continue
		}
		<-s.wake
	}
}
