package join

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime"
	"github.com/weirstream/weir/state"
)

// Side is one input of a two-input operator: Left (input 1) or Right
// (input 2).
type Side uint8

const (
	Left Side = iota
	Right
)

func (s Side) String() string {
	if s == Right {
		return "right"
	}
	return "left"
}

// ErrBounds is the error of an interval join whose lower bound is above
// its upper bound.
var ErrBounds = errors.New("join: lower bound above upper bound")

// ErrNoTimestamp is the error of an element without a timestamp
// (math.MinInt64): an interval join works in event time.
var ErrNoTimestamp = errors.New("join: element without timestamp")

// IntervalConfig describes an interval join: a left element at l and a
// right element at r of the same key join when l + Lower ≤ r ≤ l + Upper,
// each bound inclusive unless it is exclusive.
type IntervalConfig struct {
	Lower, Upper                   int64
	LowerExclusive, UpperExclusive bool
	// Name names the join's state in its backend (default "interval"):
	// several joins may share one backend under different names.
	Name string
}

// Bounds returns the inclusive bounds [lo, hi] of c: Lower + 1 with an
// exclusive lower bound, Upper - 1 with an exclusive upper bound. It fails
// with ErrBounds when Lower > Upper (compared as given) and when a bound
// leaves the int64 range; lo > hi is possible (equal bounds with an
// exclusive end) and joins nothing.
func (c IntervalConfig) Bounds() (lo, hi int64, err error) {
	if c.Lower > c.Upper {
		return 0, 0, fmt.Errorf("%w (%d > %d)", ErrBounds, c.Lower, c.Upper)
	}
	lo, hi = c.Lower, c.Upper
	if c.LowerExclusive {
		if lo == math.MaxInt64 {
			return 0, 0, fmt.Errorf("join: exclusive lower bound %d has no successor", lo)
		}
		lo++
	}
	if c.UpperExclusive {
		if hi == math.MinInt64 {
			return 0, 0, fmt.Errorf("join: exclusive upper bound %d has no predecessor", hi)
		}
		hi--
	}
	return lo, hi, nil
}

// IntervalOutput receives what an interval join emits.
type IntervalOutput[L, R any] interface {
	// Joined is a pair of the current key: timestamp max(left's, right's).
	Joined(left L, right R, ts int64) error
	// LateLeft and LateRight are elements behind the watermark, dropped
	// (and counted).
	LateLeft(v L, ts int64) error
	LateRight(v R, ts int64) error
}

// Interval is the core of a keyed event-time interval join (Flink's
// IntervalJoinOperator). Each side keeps its elements as long as an
// element of the other side could still match them. They are keyed
// state: per record key and side one list state holding the side's
// elements in ascending timestamp order (arrival order among equal
// timestamps), each framed as
//
//	uvarint length | encoded element | timestamp (8 bytes, big endian, sign bit flipped)
//
// so that the last 8 bytes are the latest timestamp: elements in
// timestamp order are appended, one backend call. A side of a key has a
// cleanup timer (eventtime.TimerService) at the cleanup time of its
// earliest element, which removes the elements whose cleanup time the
// watermark reached and sets the timer again for the next. Checkpoints,
// savepoints and rescaling by key group need nothing from the core.
//
// It is pure: elements and watermarks come in as method calls, joins
// leave through the Output; it reads no clock and starts no goroutine.
// The caller:
//
//  1. Restores the keyed backend (if the task starts from a checkpoint),
//     then calls NewInterval: the buffers and timers are the backend's.
//     The watermark is not part of them and starts at math.MinInt64.
//  2. For each element: sets the backend's current key to the element's,
//     then ProcessLeft or ProcessRight with its timestamp.
//  3. When the operator's combined input watermark rises: AdvanceWatermark,
//     then forwards the watermark.
//  4. Before the backend's snapshot: Flush.
type Interval[L, R any] struct {
	b      state.KeyedBackend
	lc     codec.Codec[L]
	rc     codec.Codec[R]
	out    IntervalOutput[L, R]
	lo, hi int64
	ids    [2]state.StateID // each side's list state
	timers *eventtime.TimerService
	wm     int64
	late   int64

	ns    [1]byte
	elem  []byte // scratch: an element being added
	arena []byte // scratch: elements a scan matched, a list rewritten
}

// NewInterval returns the interval join cfg over backend b, continuing from
// what b holds; lc and rc encode the left and right elements in the
// buffers.
func NewInterval[L, R any](b state.KeyedBackend, cfg IntervalConfig, lc codec.Codec[L], rc codec.Codec[R], out IntervalOutput[L, R]) (*Interval[L, R], error) {
	lo, hi, err := cfg.Bounds()
	if err != nil {
		return nil, err
	}
	if b == nil || lc == nil || rc == nil || out == nil {
		return nil, errors.New("join: interval join needs a backend, both codecs and an output")
	}
	name := cfg.Name
	if name == "" {
		name = "interval"
	}
	j := &Interval[L, R]{b: b, lc: lc, rc: rc, out: out, lo: lo, hi: hi, wm: math.MinInt64}
	for s, side := range [2]string{"left", "right"} {
		// A list of framed elements: a side's codec's encoding, then its
		// timestamp (elemHead, add).
		format := codec.FormatIdentity("interval-element", any(lc))
		if s == 1 {
			format = codec.FormatIdentity("interval-element", any(rc))
		}
		id, err := state.RegisterStateFormat(b, "_interval/"+name+"/"+side, state.KindList, format)
		if err != nil {
			return nil, fmt.Errorf("join: interval join %q: %w", name, err)
		}
		j.ids[s] = id
	}
	if j.timers, err = eventtime.NewTimerService(b, "interval-"+name); err != nil {
		return nil, err
	}
	return j, nil
}

// Watermark is the join's event time: the latest AdvanceWatermark
// (math.MinInt64 before the first).
func (j *Interval[L, R]) Watermark() int64 { return j.wm }

// LateRecordsDropped counts the late elements dropped.
func (j *Interval[L, R]) LateRecordsDropped() int64 { return j.late }

// ProcessLeft handles a left element at ts of the backend's current key:
// late (ts below the watermark) it is dropped; else it joins, by ascending
// timestamp then arrival, the right elements at ts+lo … ts+hi, and waits in
// the left buffer for those still to come.
func (j *Interval[L, R]) ProcessLeft(v L, ts int64) error {
	if ts == math.MinInt64 {
		return ErrNoTimestamp
	}
	if ts < j.wm {
		j.late++
		return j.out.LateLeft(v, ts)
	}
	if err := j.add(Left, ts, j.lc.Append(j.elemHead(), v)); err != nil {
		return err
	}
	return j.scan(Right, satAdd(ts, j.lo), satAdd(ts, j.hi), func(p []byte, rts int64) error {
		r, err := j.rc.Decode(p)
		if err != nil {
			return fmt.Errorf("join: decoding a buffered right element: %w", err)
		}
		return j.out.Joined(v, r, max(ts, rts))
	})
}

// ProcessRight handles a right element at ts of the backend's current
// key, as ProcessLeft with the mirrored bounds: it joins the left elements
// at ts-hi … ts-lo.
func (j *Interval[L, R]) ProcessRight(v R, ts int64) error {
	if ts == math.MinInt64 {
		return ErrNoTimestamp
	}
	if ts < j.wm {
		j.late++
		return j.out.LateRight(v, ts)
	}
	if err := j.add(Right, ts, j.rc.Append(j.elemHead(), v)); err != nil {
		return err
	}
	return j.scan(Left, satSub(ts, j.hi), satSub(ts, j.lo), func(p []byte, lts int64) error {
		l, err := j.lc.Decode(p)
		if err != nil {
			return fmt.Errorf("join: decoding a buffered left element: %w", err)
		}
		return j.out.Joined(l, v, max(ts, lts))
	})
}

// AdvanceWatermark moves the join's event time to wm, if wm is above it,
// and drops every bucket whose cleanup time is at or behind wm: on the
// left ts + hi (ts if hi ≤ 0), on the right ts - lo (ts if lo ≥ 0). It
// fails when wm is below the watermark.
func (j *Interval[L, R]) AdvanceWatermark(wm int64) error {
	if wm < j.wm {
		return fmt.Errorf("join: watermark %d below %d", wm, j.wm)
	}
	if wm == j.wm {
		return nil
	}
	j.wm = wm
	return j.timers.AdvanceWatermark(wm, j.cleanup)
}

// Flush writes the cleanup timers into the backend; call it before the
// backend's snapshot.
func (j *Interval[L, R]) Flush() error { return j.timers.Flush() }

// cleanupTime is when the bucket at ts of side s can match nothing any
// more.
func (j *Interval[L, R]) cleanupTime(s Side, ts int64) int64 {
	if s == Left {
		if j.hi > 0 {
			return satAdd(ts, j.hi)
		}
		return ts
	}
	if j.lo < 0 {
		return satSub(ts, j.lo)
	}
	return ts
}

// elemHead returns the scratch buffer with room for an element's length
// prefix, which add fills in.
func (j *Interval[L, R]) elemHead() []byte {
	j.elem = append(j.elem[:0], make([]byte, binary.MaxVarintLen64)...)
	return j.elem
}

// frame turns enc (j.elem), an element's encoding after a
// MaxVarintLen64 gap, into the element's frame with timestamp ts.
func (j *Interval[L, R]) frame(enc []byte, ts int64) []byte {
	n := len(enc) - binary.MaxVarintLen64
	j.elem = binary.BigEndian.AppendUint64(enc, uint64(ts)^(1<<63))
	var lenBuf [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(lenBuf[:], uint64(n))
	f := j.elem[binary.MaxVarintLen64-k:]
	copy(f, lenBuf[:k])
	return f
}

// next splits the first element frame off list: its encoding, its
// timestamp, its length in bytes.
func next(list []byte) (enc []byte, ts int64, size int, err error) {
	n, k := binary.Uvarint(list)
	if k <= 0 || uint64(len(list)-k) < n+8 {
		return nil, 0, 0, fmt.Errorf("%w: interval join element framing", state.ErrCorruptState)
	}
	end := k + int(n)
	return list[k:end], getTimestamp(list[end:]), end + 8, nil
}

// add adds the element enc (after a MaxVarintLen64 gap) at ts to side s of
// the current key, behind the elements at ts or before: appended when it
// is the latest; a new earliest element sets the side's cleanup timer.
func (j *Interval[L, R]) add(s Side, ts int64, enc []byte) error {
	f := j.frame(enc, ts)
	list, _, err := j.b.Get(j.ids[s], nil)
	if err != nil {
		return err
	}
	if len(list) >= 8 && getTimestamp(list[len(list)-8:]) <= ts {
		// The common case, timestamps in order.
		return j.b.Append(j.ids[s], f)
	}
	// Out of order (or the first): inserted before the first element
	// after ts.
	at := 0
	for at < len(list) {
		_, t, size, err := next(list[at:])
		if err != nil {
			return err
		}
		if t > ts {
			break
		}
		at += size
	}
	j.arena = append(append(append(j.arena[:0], list[:at]...), f...), list[at:]...)
	if err := j.b.Put(j.ids[s], nil, j.arena); err != nil {
		return err
	}
	if at > 0 {
		return nil
	}
	// A new earliest element: the side's cleanup timer at its cleanup
	// time (one set for a later element fires and finds less to do).
	return j.timers.RegisterEventTimeTimer(j.cleanupTime(s, ts), j.namespace(s))
}

// namespace is the namespace of side s's cleanup timers: one byte, the
// side.
func (j *Interval[L, R]) namespace(s Side) []byte {
	j.ns[0] = byte(s)
	return j.ns[:1]
}

// scan calls fn for each element of side s of the current key at a
// timestamp in [from, to], by ascending timestamp then arrival.
func (j *Interval[L, R]) scan(s Side, from, to int64, fn func(p []byte, ts int64) error) error {
	if from > to {
		return nil
	}
	list, _, err := j.b.Get(j.ids[s], nil)
	if err != nil {
		return err
	}
	start, end := -1, 0
	for at := 0; at < len(list); {
		_, t, size, err := next(list[at:])
		if err != nil {
			return err
		}
		if t > to {
			break
		}
		if t >= from && start < 0 {
			start = at
		}
		at += size
		end = at
	}
	if start < 0 {
		return nil
	}
	// The list is the backend's until its next call, and a value decoded
	// from it might keep its bytes: the matches are copied.
	j.arena = append(j.arena[:0], list[start:end]...)
	for p := j.arena; len(p) > 0; {
		enc, t, size, err := next(p)
		if err != nil {
			return err
		}
		if err := fn(enc, t); err != nil {
			return err
		}
		p = p[size:]
	}
	return nil
}

// cleanup removes, when the side's cleanup timer of the timer's key
// fires, the side's elements whose cleanup time the watermark reached (a
// prefix of its list), and sets the timer again for the earliest left.
func (j *Interval[L, R]) cleanup(t eventtime.Timer) error {
	if len(t.Namespace) != 1 || t.Namespace[0] > byte(Right) {
		return fmt.Errorf("%w: interval join timer namespace of %d bytes", state.ErrCorruptState, len(t.Namespace))
	}
	s := Side(t.Namespace[0])
	list, _, err := j.b.Get(j.ids[s], nil)
	if err != nil {
		return err
	}
	at, first := 0, int64(0)
	for at < len(list) {
		_, ts, size, err := next(list[at:])
		if err != nil {
			return err
		}
		if j.cleanupTime(s, ts) > j.wm {
			first = ts
			break
		}
		at += size
	}
	switch {
	case at == 0:
		return nil // the timer of an earliest element that went already
	case at == len(list):
		return j.b.Clear(j.ids[s])
	}
	j.arena = append(j.arena[:0], list[at:]...)
	if err := j.b.Put(j.ids[s], nil, j.arena); err != nil {
		return err
	}
	return j.timers.RegisterEventTimeTimer(j.cleanupTime(s, first), j.namespace(s))
}

// Buffered calls fn for every element of side s, of every key, with its
// serialized key and timestamp, by key in no particular order, each key's
// in its list's order (for inspection and tests).
func (j *Interval[L, R]) Buffered(s Side, fn func(key []byte, ts int64, left L, right R) error) error {
	var ferr error
	err := j.b.Entries(j.ids[s], func(key []byte, _ int, _, list []byte) bool {
		for len(list) > 0 {
			enc, ts, size, err := next(list)
			if err != nil {
				ferr = err
				return false
			}
			var l L
			var r R
			if s == Left {
				l, err = j.lc.Decode(enc)
			} else {
				r, err = j.rc.Decode(enc)
			}
			if err == nil {
				err = fn(key, ts, l, r)
			}
			if err != nil {
				ferr = err
				return false
			}
			list = list[size:]
		}
		return true
	})
	if err != nil {
		return err
	}
	return ferr
}

// getTimestamp reads a timestamp written as 8 big-endian bytes with the
// sign bit flipped (byte order is numeric order).
func getTimestamp(p []byte) int64 { return int64(binary.BigEndian.Uint64(p) ^ (1 << 63)) }

func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case b > 0 && s < a:
		return math.MaxInt64
	case b < 0 && s > a:
		return math.MinInt64
	}
	return s
}

func satSub(a, b int64) int64 {
	if b == math.MinInt64 {
		if a >= 0 {
			return math.MaxInt64
		}
		return a - b
	}
	return satAdd(a, -b)
}
