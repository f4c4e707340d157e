package window

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Window is the span of time a window operator groups elements by: the
// time window [Start, End), or a key's global window, which holds all of
// the key's elements and never ends.
type Window struct {
	Start, End int64
	global     bool
}

// GlobalWindow returns the global window.
func GlobalWindow() Window {
	return Window{Start: math.MinInt64, End: math.MaxInt64, global: true}
}

// IsGlobal reports whether w is the global window.
func (w Window) IsGlobal() bool { return w.global }

// MaxTimestamp is the last timestamp in w: End - 1, or math.MaxInt64 for
// the global window. A window's results carry it as their timestamp.
func (w Window) MaxTimestamp() int64 {
	if w.global {
		return math.MaxInt64
	}
	return w.End - 1
}

// String formats w as "[Start,End)" or "global".
func (w Window) String() string {
	if w.global {
		return "global"
	}
	return fmt.Sprintf("[%d,%d)", w.Start, w.End)
}

// intersects reports whether two time windows overlap or touch.
func (w Window) intersects(o Window) bool { return w.Start <= o.End && w.End >= o.Start }

// cover returns the smallest window containing w and o.
func (w Window) cover(o Window) Window {
	return Window{Start: min(w.Start, o.Start), End: max(w.End, o.End)}
}

// windowLen is the length of an encoded time window.
const windowLen = 16

// appendWindow appends the encoding of w: nothing for the global window;
// for a time window, Start and End as 8 big-endian bytes each with the sign
// bit flipped, so that encodings compare bytewise like (Start, End).
func appendWindow(dst []byte, w Window) []byte {
	if w.global {
		return dst
	}
	dst = binary.BigEndian.AppendUint64(dst, uint64(w.Start)^(1<<63))
	return binary.BigEndian.AppendUint64(dst, uint64(w.End)^(1<<63))
}

// decodeWindow decodes what appendWindow wrote.
func decodeWindow(b []byte) (Window, error) {
	switch len(b) {
	case 0:
		return GlobalWindow(), nil
	case windowLen:
		return Window{
			Start: int64(binary.BigEndian.Uint64(b) ^ (1 << 63)),
			End:   int64(binary.BigEndian.Uint64(b[8:]) ^ (1 << 63)),
		}, nil
	}
	return Window{}, fmt.Errorf("window: corrupt window of %d bytes", len(b))
}

// addSat returns a + b, clamped to the int64 range.
func addSat(a, b int64) int64 {
	s := a + b
	if (s > a) != (b > 0) {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

// add returns a + b and whether it did not overflow.
func add(a, b int64) (int64, bool) {
	s := a + b
	return s, (s > a) == (b > 0)
}

// sub returns a - b and whether it did not overflow.
func sub(a, b int64) (int64, bool) {
	d := a - b
	return d, (d < a) == (b > 0)
}
