package cluster

import (
	"sync/atomic"
	"time"
)

// inbound is one result of RecvMsg: a message or the error that ended the
// stream.
type inbound[M any] struct {
	m   M
	err error
}

// pump receives messages until the stream fails, forwarding each (and
// finally the error) to in, in order. It records the time of the last
// message received in seen, before forwarding, so that a slow consumer of
// in does not look like a silent peer. It returns at the stream's first
// error or when stop is closed.
func pump[M any](recv func(any) error, in chan<- inbound[M], stop <-chan struct{}, seen *atomic.Int64) {
	for {
		var r inbound[M]
		r.err = recv(&r.m)
		if r.err == nil {
			seen.Store(time.Now().UnixNano())
		}
		select {
		case in <- r:
		case <-stop:
			return
		}
		if r.err != nil {
			return
		}
	}
}

// transmit is the only sender on a stream: it sends every message queued
// on out, in order, and a heartbeat every interval. It returns when stop is
// closed or after the first send error, or after sending a message for
// which last (called just before sending it) reports true; then it puts
// the error (nil after last) on done, which must have room for it.
func transmit[M any](send func(any) error, out <-chan M, heartbeat M, interval time.Duration,
	last func(*M) bool, stop <-chan struct{}, done chan<- error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var m M
		select {
		case m = <-out:
		case <-t.C:
			m = heartbeat
		case <-stop:
			return
		}
		final := last != nil && last(&m)
		if err := send(&m); err != nil {
			done <- err
			return
		}
		if final {
			done <- nil
			return
		}
	}
}

// silence is how long ago seen was stored.
func silence(seen *atomic.Int64) time.Duration {
	return time.Duration(time.Now().UnixNano() - seen.Load())
}
