package eventtime

import (
	"errors"
	"fmt"
	"math"
)

// Watermarks and event timestamps are int64 milliseconds since the Unix
// epoch. Two values are special.
const (
	// MinWatermark is the smallest watermark: "no watermark yet". Every
	// input channel of a Valve starts there, and a watermark of this value
	// promises nothing, so it is never forwarded.
	MinWatermark int64 = math.MinInt64
	// MaxWatermark is the end of event time: an input that sends it will
	// send no more records. Sources emit it when their input is exhausted.
	MaxWatermark int64 = math.MaxInt64
	// NoTimestamp is the timestamp of a record that carries none. It has
	// the value of MinWatermark, so it never advances a generator.
	NoTimestamp int64 = math.MinInt64
)

// Status is a watermark status: whether a stream is expected to carry
// records and watermarks (Active), or has gone quiet for a while (Idle).
// Downstream valves do not wait for idle inputs. The zero value is Active.
type Status uint8

const (
	// Active: the stream carries records and watermarks; its watermark
	// holds back the combined watermark of the valve that receives it.
	Active Status = iota
	// Idle: the stream has no records for now; the receiving valve leaves
	// it out of its combined watermark until it turns active again.
	Idle
)

func (s Status) String() string {
	switch s {
	case Active:
		return "active"
	case Idle:
		return "idle"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// ChannelIndex is the position of one input channel within a task's
// inputs, 0..N-1.
type ChannelIndex int

// ErrInvalidArgument is returned (wrapped, with the offending value) by the
// constructors of this package when a parameter is out of range. Check
// with errors.Is.
var ErrInvalidArgument = errors.New("eventtime: invalid argument")
