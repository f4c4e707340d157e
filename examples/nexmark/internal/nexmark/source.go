package nexmark

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/weirstream/weir"
)

// SourceConfig configures Source.
type SourceConfig struct {
	// Generator configures the events.
	Generator Config
	// Events is how many events the source makes (event numbers 0 to
	// Events−1); negative: unbounded. Zero makes none.
	Events int64
	// Limit caps the events per second of wall-clock time of the whole
	// source, shared evenly by its subtasks (0: as fast as it goes).
	Limit float64
}

// WatermarkBound is the out-of-orderness bound of the source's
// watermarks: an event's timestamp minus 4 s, as Flink's Nexmark DDL.
const WatermarkBound = 4 * time.Second

// Source returns the stream of cfg's events, with their DateTime as event
// timestamps and watermarks of bounded out-of-orderness WatermarkBound
// generated per subtask. Subtask i of p generates event numbers i, i+p,
// i+2p, … in increasing order; its position is checkpointed, so a
// restarted job replays exactly, and a job restored at another
// parallelism shares the event numbers not generated yet among its new
// subtasks. A bad configuration is an error.
func Source(env *weir.Environment, cfg SourceConfig) (*weir.Stream[Event], error) {
	g, err := New(cfg.Generator)
	if err != nil {
		return nil, err
	}
	if cfg.Limit < 0 || math.IsNaN(cfg.Limit) || math.IsInf(cfg.Limit, 0) {
		return nil, fmt.Errorf("nexmark: rate limit %v must be a positive number or 0", cfg.Limit)
	}
	src := weir.FromPollingReader(env, "nexmark source", func(sub, par int) (weir.PollingReader[Event], error) {
		r := &Reader{gen: g.Clone(), n: cfg.Events, ps: []progression{{int64(sub), int64(par)}}}
		if cfg.Limit > 0 {
			r.limit = cfg.Limit / float64(par)
		}
		return r, nil
	}).WithCodec(EventCodec{}).UID("nexmark-source")
	return weir.AssignTimestamps(src, weir.BoundedOutOfOrderness(WatermarkBound, Event.DateTime)), nil
}

// progression is the event numbers next, next+step, next+2·step, …
type progression struct{ next, step int64 }

// Reader is a source subtask's reader (a weir.PollingReader[Event] and
// weir.RescalableReader): it generates the event numbers of its
// progressions, always the smallest next, so that its events come in
// increasing event number whatever it was restored from.
type Reader struct {
	gen *Generator
	n   int64 // events in all; < 0: unbounded
	ps  []progression

	limit float64 // events per second; 0: none
	start time.Time
	sent  int64
	timer *time.Timer
	ready chan struct{}
}

// Poll implements weir.PollingReader.
func (r *Reader) Poll() (Event, weir.ReadStatus, error) {
	if r.limit > 0 {
		now := time.Now()
		if r.start.IsZero() {
			r.start = now
		}
		if float64(r.sent) >= now.Sub(r.start).Seconds()*r.limit {
			return Event{}, weir.NothingAvailable, nil
		}
	}
	for len(r.ps) > 0 {
		i := 0
		for j := 1; j < len(r.ps); j++ {
			if r.ps[j].next < r.ps[i].next {
				i = j
			}
		}
		p := &r.ps[i]
		if r.n >= 0 && p.next >= r.n {
			r.ps = append(r.ps[:i], r.ps[i+1:]...)
			continue
		}
		e := r.gen.Event(p.next)
		p.next += p.step
		r.sent++
		return e, weir.Read, nil
	}
	return Event{}, weir.EndOfInput, nil
}

// Available implements weir.PollingReader: ready once the rate limit
// lets the next event through.
func (r *Reader) Available() <-chan struct{} {
	due := r.start.Add(time.Duration(float64(r.sent+1) / r.limit * float64(time.Second)))
	d := max(time.Until(due), time.Millisecond)
	if r.ready == nil {
		r.ready = make(chan struct{}, 1)
		r.timer = time.AfterFunc(d, func() {
			select {
			case r.ready <- struct{}{}:
			default:
			}
		})
	} else {
		r.timer.Reset(d)
	}
	return r.ready
}

// Close stops the reader's timer.
func (r *Reader) Close() error {
	if r.timer != nil {
		r.timer.Stop()
	}
	return nil
}

// Position implements weir.PositionedReader: the progressions, as
// varints.
func (r *Reader) Position() ([]byte, error) {
	b := binary.AppendUvarint(nil, uint64(len(r.ps)))
	for _, p := range r.ps {
		b = binary.AppendVarint(b, p.next)
		b = binary.AppendVarint(b, p.step)
	}
	return b, nil
}

// ErrBadPosition is returned by Seek and Rescale for a position they
// cannot read.
var ErrBadPosition = errors.New("nexmark: bad source position")

func decodePosition(b []byte) ([]progression, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, ErrBadPosition
	}
	b = b[k:]
	ps := make([]progression, 0, n)
	for range n {
		next, k1 := binary.Varint(b)
		if k1 <= 0 {
			return nil, ErrBadPosition
		}
		step, k2 := binary.Varint(b[k1:])
		if k2 <= 0 || next < 0 || step <= 0 {
			return nil, fmt.Errorf("%w: progression (%d, %d)", ErrBadPosition, next, step)
		}
		b = b[k1+k2:]
		ps = append(ps, progression{next, step})
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrBadPosition, len(b))
	}
	return ps, nil
}

// Seek implements weir.PositionedReader.
func (r *Reader) Seek(pos []byte) error {
	ps, err := decodePosition(pos)
	if err != nil {
		return err
	}
	r.ps = ps
	return nil
}

// Rescale implements weir.RescalableReader: every new subtask lists the
// old subtasks' unfinished progressions in the same order, halves them
// (a progression becomes its even and odd terms) until there are at
// least as many as subtasks, and takes every parallelism-th one.
func (r *Reader) Rescale(positions [][]byte, subtask, parallelism int) error {
	var all []progression
	for _, pos := range positions {
		ps, err := decodePosition(pos)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if r.n < 0 || p.next < r.n {
				all = append(all, p)
			}
		}
	}
	for len(all) > 0 && len(all) < parallelism {
		p := all[0]
		all = append(all[1:], progression{p.next, 2 * p.step}, progression{p.next + p.step, 2 * p.step})
	}
	r.ps = nil
	for j := subtask; j < len(all); j += parallelism {
		r.ps = append(r.ps, all[j])
	}
	return nil
}
