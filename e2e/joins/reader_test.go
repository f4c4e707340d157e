package joins_test

import (
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
)

// progression is the indices next, next+step, …
type progression struct{ next, step int64 }

// heldReader reads evs at the indices of its progressions, round robin.
// With pause > 0 it waits for ever after pause values (a job stopped
// mid-input); with release it asks release at the end of its input
// whether to end (io.EOF), fail (an error) or wait (nil). Its position
// (the progressions) is checkpointed, and a restore at another
// parallelism deals the old progressions out to the new readers.
type heldReader struct {
	evs     []event
	ps      []progression
	cur     int
	read    int
	pause   int
	paused  *atomic.Int64
	release func() error
	timer   *time.Timer
	ready   chan struct{}
}

func newHeldReader(evs []event, sub, par, pause int, paused *atomic.Int64, release func() error) *heldReader {
	return &heldReader{evs: evs, ps: []progression{{int64(sub), int64(par)}}, pause: pause, paused: paused, release: release}
}

func (r *heldReader) Poll() (event, weir.ReadStatus, error) {
	if r.pause > 0 && r.read == r.pause {
		r.read++
		r.paused.Add(1)
	}
	if r.pause > 0 && r.read > r.pause {
		return event{}, weir.NothingAvailable, nil
	}
	for len(r.ps) > 0 {
		r.cur %= len(r.ps)
		p := &r.ps[r.cur]
		if p.next >= int64(len(r.evs)) {
			r.ps = slices.Delete(r.ps, r.cur, r.cur+1)
			continue
		}
		e := r.evs[p.next]
		p.next += p.step
		r.cur++
		r.read++
		return e, weir.Read, nil
	}
	if r.release == nil {
		return event{}, weir.EndOfInput, nil
	}
	switch err := r.release(); {
	case err == io.EOF:
		return event{}, weir.EndOfInput, nil
	case err != nil:
		return event{}, weir.EndOfInput, err
	}
	return event{}, weir.NothingAvailable, nil
}

// Available: paused, never; held at the end, in a millisecond.
func (r *heldReader) Available() <-chan struct{} {
	if r.pause > 0 && r.read > r.pause {
		return nil
	}
	if r.ready == nil {
		r.ready = make(chan struct{}, 1)
		r.timer = time.AfterFunc(time.Millisecond, r.signal)
	} else {
		r.timer.Reset(time.Millisecond)
	}
	return r.ready
}

func (r *heldReader) signal() {
	select {
	case r.ready <- struct{}{}:
	default:
	}
}

func (r *heldReader) Close() error {
	if r.timer != nil {
		r.timer.Stop()
	}
	return nil
}

func (r *heldReader) Position() ([]byte, error) {
	var b []byte
	for _, p := range r.ps {
		b = codec.Int64().Append(codec.Int64().Append(b, p.next), p.step)
	}
	return b, nil
}

func decodeProgressions(pos []byte) ([]progression, error) {
	if len(pos)%16 != 0 {
		return nil, fmt.Errorf("position of %d bytes", len(pos))
	}
	var ps []progression
	for ; len(pos) > 0; pos = pos[16:] {
		n, _ := codec.Int64().Decode(pos[:8])
		s, _ := codec.Int64().Decode(pos[8:16])
		ps = append(ps, progression{n, s})
	}
	return ps, nil
}

func (r *heldReader) Seek(pos []byte) (err error) {
	r.ps, err = decodeProgressions(pos)
	return err
}

func (r *heldReader) Rescale(positions [][]byte, sub, par int) error {
	r.ps = nil
	k := 0
	for _, pos := range positions {
		ps, err := decodeProgressions(pos)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if k%par == sub {
				r.ps = append(r.ps, p)
			}
			k++
		}
	}
	return nil
}
