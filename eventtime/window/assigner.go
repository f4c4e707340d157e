package window

import (
	"errors"
	"fmt"
)

// Time is the clock windows follow.
type Time uint8

const (
	// EventTime windows assign elements by their timestamps and end when
	// the watermark passes them.
	EventTime Time = iota
	// ProcessingTime windows assign elements by the processing time at
	// which they arrive and end when processing time passes them.
	ProcessingTime
)

func (t Time) String() string {
	switch t {
	case EventTime:
		return "event time"
	case ProcessingTime:
		return "processing time"
	}
	return fmt.Sprintf("Time(%d)", uint8(t))
}

type assignerKind uint8

const (
	assignerNone assignerKind = iota
	assignerTumbling
	assignerSliding
	assignerSession
	assignerGlobal
)

// MaxSlidingWindows is the largest size / slide of sliding windows (the
// number of windows an element can fall in).
const MaxSlidingWindows = 10_000_000

// Assigner decides which windows an element belongs to (Flink's
// WindowAssigner). Build one with TumblingWindows, SlidingWindows,
// SessionWindows or GlobalWindows; the zero Assigner is invalid.
type Assigner struct {
	kind                     assignerKind
	size, slide, offset, gap int64
}

// TumblingWindows assigns each element to one window of length size: the
// windows [offset + k·size, offset + (k+1)·size). It needs size > 0 and
// |offset| < size.
func TumblingWindows(size, offset int64) Assigner {
	return Assigner{kind: assignerTumbling, size: size, offset: offset}
}

// SlidingWindows assigns each element to every window of length size it
// falls in, windows starting every slide (shifted by offset): size / slide
// windows, or none when it falls in the gap between two windows (size <
// slide). It needs size > 0, slide > 0, |offset| < slide and size / slide
// ≤ MaxSlidingWindows.
func SlidingWindows(size, slide, offset int64) Assigner {
	return Assigner{kind: assignerSliding, size: size, slide: slide, offset: offset}
}

// SessionWindows assigns each element at t to [t, t + gap) and merges the
// windows of a key that overlap or touch: a session ends after gap without
// elements. It needs gap > 0.
func SessionWindows(gap int64) Assigner {
	return Assigner{kind: assignerSession, gap: gap}
}

// GlobalWindows assigns every element of a key to the key's one global
// window. Its default trigger never fires: give it another trigger.
func GlobalWindows() Assigner { return Assigner{kind: assignerGlobal} }

// String describes a.
func (a Assigner) String() string {
	switch a.kind {
	case assignerTumbling:
		return fmt.Sprintf("tumbling(size=%d, offset=%d)", a.size, a.offset)
	case assignerSliding:
		return fmt.Sprintf("sliding(size=%d, slide=%d, offset=%d)", a.size, a.slide, a.offset)
	case assignerSession:
		return fmt.Sprintf("session(gap=%d)", a.gap)
	case assignerGlobal:
		return "global"
	}
	return "no assigner"
}

func (a Assigner) validate() error {
	switch a.kind {
	case assignerTumbling:
		if a.size <= 0 {
			return fmt.Errorf("window: tumbling window size %d, want > 0", a.size)
		}
		if a.offset <= -a.size || a.offset >= a.size {
			return fmt.Errorf("window: tumbling window offset %d, want |offset| < size %d", a.offset, a.size)
		}
	case assignerSliding:
		if a.size <= 0 {
			return fmt.Errorf("window: sliding window size %d, want > 0", a.size)
		}
		if a.slide <= 0 {
			return fmt.Errorf("window: sliding window slide %d, want > 0", a.slide)
		}
		if a.offset <= -a.slide || a.offset >= a.slide {
			return fmt.Errorf("window: sliding window offset %d, want |offset| < slide %d", a.offset, a.slide)
		}
		if a.size/a.slide > MaxSlidingWindows {
			return fmt.Errorf("window: sliding windows of size %d every %d: more than %d windows per element", a.size, a.slide, MaxSlidingWindows)
		}
	case assignerSession:
		if a.gap <= 0 {
			return fmt.Errorf("window: session gap %d, want > 0", a.gap)
		}
	case assignerGlobal:
	default:
		return errors.New("window: no window assigner")
	}
	return nil
}

// merging reports whether a's windows merge (sessions).
func (a Assigner) merging() bool { return a.kind == assignerSession }

// startWithOffset is the start of the window of length size (shifted by
// offset) that holds t: t - ((t - offset) mod size), the remainder made
// non-negative.
func startWithOffset(t, offset, size int64) (int64, error) {
	d, ok := sub(t, offset)
	if !ok {
		return 0, fmt.Errorf("%w: timestamp %d - offset %d", ErrOutOfRange, t, offset)
	}
	r := d % size
	if r < 0 {
		r += size
	}
	s, ok := sub(t, r)
	if !ok {
		return 0, fmt.Errorf("%w: window start of timestamp %d", ErrOutOfRange, t)
	}
	return s, nil
}

// assign appends the windows of an element at t to dst, in Flink's order
// (sliding: latest start first).
func (a Assigner) assign(dst []Window, t int64) ([]Window, error) {
	switch a.kind {
	case assignerTumbling:
		start, err := startWithOffset(t, a.offset, a.size)
		if err != nil {
			return dst, err
		}
		end, ok := add(start, a.size)
		if !ok {
			return dst, fmt.Errorf("%w: end of the window starting at %d", ErrOutOfRange, start)
		}
		return append(dst, Window{Start: start, End: end}), nil
	case assignerSliding:
		last, err := startWithOffset(t, a.offset, a.slide)
		if err != nil {
			return dst, err
		}
		lowest, ok := sub(t, a.size)
		if !ok {
			return dst, fmt.Errorf("%w: timestamp %d - size %d", ErrOutOfRange, t, a.size)
		}
		for s := last; s > lowest; {
			end, ok := add(s, a.size)
			if !ok {
				return dst, fmt.Errorf("%w: end of the window starting at %d", ErrOutOfRange, s)
			}
			dst = append(dst, Window{Start: s, End: end})
			if s, ok = sub(s, a.slide); !ok {
				break // below math.MinInt64, so below lowest too
			}
		}
		return dst, nil
	case assignerSession:
		end, ok := add(t, a.gap)
		if !ok {
			return dst, fmt.Errorf("%w: session of timestamp %d with gap %d", ErrOutOfRange, t, a.gap)
		}
		return append(dst, Window{Start: t, End: end}), nil
	case assignerGlobal:
		return append(dst, GlobalWindow()), nil
	}
	return dst, errors.New("window: no window assigner")
}
