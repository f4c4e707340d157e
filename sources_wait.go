package weir

import (
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/weirstream/weir/task"
)

// GeneratorOption configures FromGenerator.
type GeneratorOption interface{ applyGenerator(*generatorConfig) }

type generatorConfig struct{ rate float64 }

type generatorOption func(*generatorConfig)

func (f generatorOption) applyGenerator(c *generatorConfig) { f(c) }

// Rate limits a generator source to perSecond values per second in all
// (each of its p subtasks generates perSecond/p). The source waits
// between values without blocking its task: checkpoints and timers go on.
func Rate(perSecond float64) GeneratorOption {
	return generatorOption(func(c *generatorConfig) { c.rate = perSecond })
}

// rateLimit lets values through at a fixed rate, from its first use, with
// a burst of at most a tenth of a second's worth.
type rateLimit struct {
	perSec  float64
	start   time.Time
	granted float64 // values let through since start
	timer   *time.Timer
	ready   chan struct{} // buffered(1): the timer fired
}

func newRateLimit(perSec float64) *rateLimit {
	return &rateLimit{perSec: perSec, ready: make(chan struct{}, 1)}
}

// take reports whether one more value may go now.
func (l *rateLimit) take(now time.Time) bool {
	if l.start.IsZero() {
		l.start = now
	}
	due := now.Sub(l.start).Seconds() * l.perSec
	if burst := l.perSec / 10; due-l.granted > burst+1 {
		// Idle for a while: no catch-up beyond the burst.
		l.granted = due - burst - 1
	}
	if l.granted >= due {
		return false
	}
	l.granted++
	return true
}

// available arms a timer for when the next value is due.
func (l *rateLimit) available(now time.Time) <-chan struct{} {
	next := l.start.Add(time.Duration((l.granted + 1) / l.perSec * float64(time.Second)))
	d := max(next.Sub(now), 0)
	if l.timer == nil {
		l.timer = time.AfterFunc(d, func() {
			select {
			case l.ready <- struct{}{}:
			default:
			}
		})
	} else {
		l.timer.Reset(d)
	}
	return l.ready
}

func (l *rateLimit) stop() {
	if l.timer != nil {
		l.timer.Stop()
	}
}

// rateReader is a rate-limited generator reader.
type rateReader[T any] struct {
	*indexReader[T]
	limit *rateLimit
}

func (r *rateReader[T]) Poll() (T, ReadStatus, error) {
	if !r.limit.take(time.Now()) {
		var zero T
		return zero, NothingAvailable, nil
	}
	v, ok, err := r.Next()
	switch {
	case err != nil:
		return v, EndOfInput, err
	case !ok:
		return v, EndOfInput, nil
	}
	return v, Read, nil
}

func (r *rateReader[T]) Available() <-chan struct{} { return r.limit.available(time.Now()) }

func (r *rateReader[T]) Close() error {
	r.limit.stop()
	return nil
}

// FromChannel returns a stream of the values received from ch, until ch
// is closed. Every subtask reads the same channel (each value goes to one
// of them). The source waits for values without blocking its task, so
// checkpoints and timers go on while the channel is empty.
//
// A channel cannot be replayed: with checkpointing, the values received
// after the last completed checkpoint are lost when the job fails
// (at-most-once for them), and the restarted job goes on with the values
// the channel still holds. Use it for input that may be lost, or to feed
// tests; weir logs a warning when it is used in an exactly-once job.
func FromChannel[T any](env *Environment, ch <-chan T) *Stream[T] {
	return addSource(env, "channel source", "channel source", func(int, int) (PollingReader[T], error) {
		return &chanReader[T]{ch: ch, ready: make(chan struct{}, 1), stop: make(chan struct{})}, nil
	})
}

// chanReader reads a Go channel without blocking the task: when the
// channel is empty, a waiter goroutine receives the next value for it and
// signals ready.
type chanReader[T any] struct {
	ch    <-chan T
	ready chan struct{} // buffered(1)
	stop  chan struct{}

	waiting bool // a waiter runs
	wg      sync.WaitGroup
	mu      struct {
		sync.Mutex
		v      T
		have   bool // the waiter received v
		closed bool // the waiter saw ch closed
	}
	warned bool
}

func (r *chanReader[T]) Poll() (T, ReadStatus, error) {
	var zero T
	if r.waiting {
		r.mu.Lock()
		v, have, closed := r.mu.v, r.mu.have, r.mu.closed
		done := have || closed
		if done {
			r.mu.v, r.mu.have = zero, false
		}
		r.mu.Unlock()
		if !done {
			return zero, NothingAvailable, nil
		}
		r.wg.Wait()
		r.waiting = false
		switch {
		case have:
			return v, Read, nil
		case closed:
			return zero, EndOfInput, nil
		}
	}
	select {
	case v, ok := <-r.ch:
		if !ok {
			return zero, EndOfInput, nil
		}
		return v, Read, nil
	default:
		return zero, NothingAvailable, nil
	}
}

func (r *chanReader[T]) Available() <-chan struct{} {
	if !r.waiting {
		r.waiting = true
		r.wg.Go(r.wait)
	}
	return r.ready
}

// wait receives one value (or the close) for the next Poll.
func (r *chanReader[T]) wait() {
	select {
	case v, ok := <-r.ch:
		r.mu.Lock()
		if ok {
			r.mu.v, r.mu.have = v, true
		} else {
			r.mu.closed = true
		}
		r.mu.Unlock()
		select {
		case r.ready <- struct{}{}:
		default:
		}
	case <-r.stop:
	}
}

// Close stops a waiting receive. A value it had received but the task
// did not take is lost, like any value not yet checkpointed.
func (r *chanReader[T]) Close() error {
	close(r.stop)
	r.wg.Wait()
	return nil
}

// warnNotReplayable logs once that the channel cannot be replayed.
func (r *chanReader[T]) warnNotReplayable(ctx *task.OperatorContext) {
	if !r.warned && ctx.ExactlyOnce {
		r.warned = true
		ctx.Logger.Warn("a channel source cannot replay its input: values received after the last completed checkpoint are lost if the job fails (at-most-once), despite exactly-once checkpointing",
			zap.String("task", ctx.TaskName))
	}
}
