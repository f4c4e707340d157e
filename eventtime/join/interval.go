package join

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

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
//	encoded element | its length (uvarint, bytes reversed) | timestamp (8 bytes, big endian, sign bit flipped)
//
// so that a list is read from its end: the last 8 bytes are the latest
// timestamp (elements in timestamp order are appended, one backend call),
// and the length before them leads to the element before. Every walk
// starts at the end and stops where the timestamps leave the range it
// looks for: the elements a new one joins (timestamps in order: the last
// few, however many the watermark has yet to clean up), the place of an
// element out of order, the elements a cleanup keeps. A key has one
// cleanup timer (eventtime.TimerService, empty namespace) for both sides,
// at the earliest cleanup time of their earliest elements, which removes
// the elements of both sides whose cleanup time the watermark reached and
// sets the timer again for the next: the two sides of a key are often
// cleaned at the same time, by one timer. Checkpoints, savepoints and
// rescaling by key group need nothing from the core.
//
// The list states are named "_interval/<name>/left.2" and ".../right.2":
// the buffers of the first layout ("_interval/<name>/left", length first,
// one timer per side) are refused by NewInterval, not misread.
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

	elem  []byte  // scratch: an element being added
	arena []byte  // scratch: elements a scan matched, a list rewritten
	ends  []int32 // scratch: where the frames a scan matched end, last first
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
	for _, m := range b.States() {
		if m.Name == "_interval/"+name+"/left" || m.Name == "_interval/"+name+"/right" {
			return nil, fmt.Errorf("join: interval join %q: state %q is in the layout of an earlier weir version, which this one does not read: "+
				"restore the job from a checkpoint or savepoint without the join's buffers", name, m.Name)
		}
	}
	for s, side := range [2]string{"left", "right"} {
		// A list of framed elements: a side's codec's encoding, its
		// length, its timestamp (frame, prev).
		format := codec.FormatIdentity("interval-element.2", any(lc))
		if s == 1 {
			format = codec.FormatIdentity("interval-element.2", any(rc))
		}
		id, err := state.RegisterStateFormat(b, "_interval/"+name+"/"+side+".2", state.KindList, format)
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
	if err := j.add(Left, ts, j.lc.Append(j.elem[:0], v)); err != nil {
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
	if err := j.add(Right, ts, j.rc.Append(j.elem[:0], v)); err != nil {
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

// frame turns enc (in j.elem), an element's encoding, into the element's
// frame with timestamp ts.
func (j *Interval[L, R]) frame(enc []byte, ts int64) []byte {
	n := len(enc)
	enc = binary.AppendUvarint(enc, uint64(n))
	slices.Reverse(enc[n:]) // read backwards, the length is a uvarint
	j.elem = binary.BigEndian.AppendUint64(enc, uint64(ts)^(1<<63))
	return j.elem
}

// prev reads the frame of list that ends at end (> 0): where it starts,
// its encoding, its timestamp.
func prev(list []byte, end int) (start int, enc []byte, ts int64, err error) {
	if end < 9 || end > len(list) {
		return 0, nil, 0, errFraming
	}
	ts = getTimestamp(list[end-8 : end])
	p, n := end-8, uint64(0)
	for shift := 0; ; shift += 7 {
		p--
		if p < 0 || shift > 63 {
			return 0, nil, 0, errFraming
		}
		b := list[p]
		n |= uint64(b&0x7f) << shift
		if b < 0x80 {
			break
		}
	}
	if n > uint64(p) {
		return 0, nil, 0, errFraming
	}
	start = p - int(n)
	return start, list[start:p], ts, nil
}

var errFraming = fmt.Errorf("%w: interval join element framing", state.ErrCorruptState)

// add adds the element enc (in j.elem) at ts to side s of the current key,
// behind the elements at ts or before: appended when it is the latest; a
// new earliest element sets the key's cleanup timer.
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
	// Out of order (or the first): inserted behind the last element at
	// ts or before.
	at := len(list)
	for at > 0 {
		start, _, t, err := prev(list, at)
		if err != nil {
			return err
		}
		if t <= ts {
			break
		}
		at = start
	}
	j.arena = append(append(append(j.arena[:0], list[:at]...), f...), list[at:]...)
	if err := j.b.Put(j.ids[s], nil, j.arena); err != nil {
		return err
	}
	if at > 0 {
		return nil
	}
	// A new earliest element: the key's cleanup timer at its cleanup
	// time (one set for a later element fires and finds less to do).
	return j.timers.RegisterEventTimeTimer(j.cleanupTime(s, ts), nil)
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
	// The matches are the frames list[lo:hi]: from the end, skip those
	// after to, take those from from on.
	lo, hi := -1, len(list)
	j.ends = j.ends[:0]
	for end := len(list); end > 0; {
		start, _, t, err := prev(list, end)
		if err != nil {
			return err
		}
		if t < from {
			break
		}
		if t > to {
			hi = start
		} else {
			lo = start
			j.ends = append(j.ends, int32(end))
		}
		end = start
	}
	if lo < 0 {
		return nil
	}
	// The list is the backend's until its next call, and a value decoded
	// from it might keep its bytes: the matches are copied.
	j.arena = append(j.arena[:0], list[lo:hi]...)
	for i := len(j.ends) - 1; i >= 0; i-- {
		_, enc, t, err := prev(j.arena, int(j.ends[i])-lo)
		if err != nil {
			return err
		}
		if err := fn(enc, t); err != nil {
			return err
		}
	}
	return nil
}

// cleanup removes, when the cleanup timer of the timer's key fires, the
// elements of both sides whose cleanup time the watermark reached (a
// prefix of each list), and sets the timer again for the earliest cleanup
// time left.
func (j *Interval[L, R]) cleanup(t eventtime.Timer) error {
	if len(t.Namespace) != 0 {
		return fmt.Errorf("%w: interval join timer namespace of %d bytes", state.ErrCorruptState, len(t.Namespace))
	}
	next, ok := int64(math.MaxInt64), false
	for s := range Side(2) {
		first, left, err := j.cleanupSide(s)
		if err != nil {
			return err
		}
		if left {
			next, ok = min(next, j.cleanupTime(s, first)), true
		}
	}
	if !ok {
		return nil
	}
	return j.timers.RegisterEventTimeTimer(next, nil)
}

// cleanupSide removes the elements of side s of the current key whose
// cleanup time the watermark reached and returns the timestamp of the
// earliest left, if any is.
func (j *Interval[L, R]) cleanupSide(s Side) (first int64, left bool, err error) {
	list, _, err := j.b.Get(j.ids[s], nil)
	if err != nil {
		return 0, false, err
	}
	// From the end, the elements kept: list[at:], the earliest at first.
	at := len(list)
	for at > 0 {
		start, _, ts, err := prev(list, at)
		if err != nil {
			return 0, false, err
		}
		if j.cleanupTime(s, ts) <= j.wm {
			break
		}
		at, first = start, ts
	}
	switch {
	case at == 0:
		return first, len(list) > 0, nil
	case at == len(list):
		return 0, false, j.b.Clear(j.ids[s])
	}
	j.arena = append(j.arena[:0], list[at:]...)
	return first, true, j.b.Put(j.ids[s], nil, j.arena)
}

// Buffered calls fn for every element of side s, of every key, with its
// serialized key and timestamp, by key in no particular order, each key's
// in its list's order (for inspection and tests).
func (j *Interval[L, R]) Buffered(s Side, fn func(key []byte, ts int64, left L, right R) error) error {
	var ferr error
	var ends []int
	err := j.b.Entries(j.ids[s], func(key []byte, _ int, _, list []byte) bool {
		ends = ends[:0]
		for end := len(list); end > 0; {
			start, _, _, err := prev(list, end)
			if err != nil {
				ferr = err
				return false
			}
			ends = append(ends, end)
			end = start
		}
		for i := len(ends) - 1; i >= 0; i-- {
			_, enc, ts, _ := prev(list, ends[i])
			var l L
			var r R
			var err error
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
