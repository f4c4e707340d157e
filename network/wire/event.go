package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/weirstream/weir/barrier"
)

// EventKind is the first byte of an event payload (docs/protocol.md
// "Events").
type EventKind uint8

const (
	// EventBarrier is a checkpoint barrier.
	EventBarrier EventKind = 1
	// EventCancelCheckpoint is a cancel checkpoint marker.
	EventCancelCheckpoint EventKind = 2
	// EventEndOfPartition is the last buffer of a subpartition.
	EventEndOfPartition EventKind = 3
	// EventEndOfData says the producer will emit no more records.
	EventEndOfData EventKind = 4
	// EventWatermark carries a watermark.
	EventWatermark EventKind = 5
	// EventAnnouncement announces an event (an aligned barrier) queued
	// behind data, under the sequence number it was sent with.
	EventAnnouncement EventKind = 6
	// EventWatermarkStatus says whether the producer's watermarks are
	// active or idle.
	EventWatermarkStatus EventKind = 7
)

// Watermark statuses of an EventWatermarkStatus.
const (
	StatusActive uint8 = 0
	StatusIdle   uint8 = 1
)

func (k EventKind) String() string {
	switch k {
	case EventBarrier:
		return "barrier"
	case EventCancelCheckpoint:
		return "cancel-checkpoint"
	case EventEndOfPartition:
		return "end-of-partition"
	case EventEndOfData:
		return "end-of-data"
	case EventWatermark:
		return "watermark"
	case EventAnnouncement:
		return "announcement"
	case EventWatermarkStatus:
		return "watermark-status"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is a decoded event payload. Only the fields of its Kind are
// meaningful.
type Event struct {
	Kind EventKind
	// Barrier is the barrier of an EventBarrier.
	Barrier barrier.Barrier
	// CancelID is the checkpoint an EventCancelCheckpoint cancels.
	CancelID barrier.CheckpointID
	// Watermark is the timestamp of an EventWatermark.
	Watermark int64
	// Status is the StatusActive or StatusIdle of an
	// EventWatermarkStatus.
	Status uint8
	// AnnouncedSeq and Announced are the sequence number and the event an
	// EventAnnouncement announces; Announced is never itself an
	// announcement.
	AnnouncedSeq uint32
	Announced    *Event
}

// Event payload sizes, kind byte included.
const (
	barrierEventSize   = 1 + 8 + 8 + 1 + 1 + 8
	cancelEventSize    = 1 + 8
	watermarkEventSize = 1 + 8
	statusEventSize    = 1 + 1
	emptyEventSize     = 1
	announcementHeader = 1 + 4
	maxTimeoutMillis   = math.MaxInt64 / int64(time.Millisecond)
)

// AppendEvent appends the payload of e. It panics if e cannot be encoded:
// an unknown kind, an announcement without an announced event or of an
// announcement, a negative alignment timeout, or an unknown barrier kind or
// alignment.
func AppendEvent(dst []byte, e Event) []byte {
	switch e.Kind {
	case EventBarrier:
		b := e.Barrier
		o := b.Options
		if o.Kind > barrier.Savepoint || o.Alignment > barrier.AlignedWithTimeout || o.AlignmentTimeout < 0 {
			panic(fmt.Sprintf("wire: cannot encode barrier options %+v", o))
		}
		dst = append(dst, byte(EventBarrier))
		dst = binary.BigEndian.AppendUint64(dst, uint64(b.ID))
		dst = binary.BigEndian.AppendUint64(dst, uint64(b.Timestamp))
		dst = append(dst, byte(o.Kind), byte(o.Alignment))
		return binary.BigEndian.AppendUint64(dst, uint64(o.AlignmentTimeout/time.Millisecond))
	case EventCancelCheckpoint:
		dst = append(dst, byte(EventCancelCheckpoint))
		return binary.BigEndian.AppendUint64(dst, uint64(e.CancelID))
	case EventEndOfPartition, EventEndOfData:
		return append(dst, byte(e.Kind))
	case EventWatermark:
		dst = append(dst, byte(EventWatermark))
		return binary.BigEndian.AppendUint64(dst, uint64(e.Watermark))
	case EventWatermarkStatus:
		if e.Status > StatusIdle {
			panic(fmt.Sprintf("wire: cannot encode watermark status %d", e.Status))
		}
		return append(dst, byte(EventWatermarkStatus), e.Status)
	case EventAnnouncement:
		if e.Announced == nil || e.Announced.Kind == EventAnnouncement {
			panic("wire: an announcement must announce a non-announcement event")
		}
		dst = append(dst, byte(EventAnnouncement))
		dst = binary.BigEndian.AppendUint32(dst, e.AnnouncedSeq)
		return AppendEvent(dst, *e.Announced)
	}
	panic(fmt.Sprintf("wire: cannot encode %s", e.Kind))
}

// DecodeEvent decodes an event payload. It returns a *ProtocolError if p is
// shorter or longer than its kind defines, names an unknown kind, barrier
// type, alignment or watermark status, has checkpoint id 0, an alignment timeout beyond
// time.Duration's range, or announces an announcement.
func DecodeEvent(p []byte) (Event, error) {
	e, n, err := decodeEvent(p, false)
	if err != nil {
		return Event{}, err
	}
	if n != len(p) {
		return Event{}, eventErr("%s payload of %d bytes, want %d", e.Kind, len(p), n)
	}
	return e, nil
}

func eventErr(format string, args ...any) *ProtocolError {
	return &ProtocolError{Reason: "event: " + fmt.Sprintf(format, args...)}
}

// decodeEvent decodes the event at the start of p and returns how many
// bytes it took.
func decodeEvent(p []byte, nested bool) (Event, int, error) {
	if len(p) == 0 {
		return Event{}, 0, eventErr("empty payload")
	}
	k := EventKind(p[0])
	need := func(n int) error {
		if len(p) < n {
			return eventErr("%s payload of %d bytes, want %d", k, len(p), n)
		}
		return nil
	}
	e := Event{Kind: k}
	switch k {
	case EventBarrier:
		if err := need(barrierEventSize); err != nil {
			return Event{}, 0, err
		}
		b := &e.Barrier
		b.ID = barrier.CheckpointID(binary.BigEndian.Uint64(p[1:]))
		b.Timestamp = int64(binary.BigEndian.Uint64(p[9:]))
		b.Options.Kind = barrier.Kind(p[17])
		b.Options.Alignment = barrier.Alignment(p[18])
		ms := binary.BigEndian.Uint64(p[19:])
		switch {
		case b.ID == 0:
			return Event{}, 0, eventErr("barrier with checkpoint id 0")
		case b.Options.Kind > barrier.Savepoint:
			return Event{}, 0, eventErr("barrier type %d", p[17])
		case b.Options.Alignment > barrier.AlignedWithTimeout:
			return Event{}, 0, eventErr("barrier alignment %d", p[18])
		case ms > uint64(maxTimeoutMillis):
			return Event{}, 0, eventErr("alignment timeout of %d ms out of range", ms)
		}
		b.Options.AlignmentTimeout = time.Duration(ms) * time.Millisecond
		return e, barrierEventSize, nil
	case EventCancelCheckpoint:
		if err := need(cancelEventSize); err != nil {
			return Event{}, 0, err
		}
		e.CancelID = barrier.CheckpointID(binary.BigEndian.Uint64(p[1:]))
		if e.CancelID == 0 {
			return Event{}, 0, eventErr("cancel marker with checkpoint id 0")
		}
		return e, cancelEventSize, nil
	case EventEndOfPartition, EventEndOfData:
		return e, emptyEventSize, nil
	case EventWatermark:
		if err := need(watermarkEventSize); err != nil {
			return Event{}, 0, err
		}
		e.Watermark = int64(binary.BigEndian.Uint64(p[1:]))
		return e, watermarkEventSize, nil
	case EventWatermarkStatus:
		if err := need(statusEventSize); err != nil {
			return Event{}, 0, err
		}
		e.Status = p[1]
		if e.Status > StatusIdle {
			return Event{}, 0, eventErr("watermark status %d", p[1])
		}
		return e, statusEventSize, nil
	case EventAnnouncement:
		if nested {
			return Event{}, 0, eventErr("announcement of an announcement")
		}
		if len(p) < announcementHeader+1 {
			return Event{}, 0, eventErr("announcement payload of %d bytes, want at least %d", len(p), announcementHeader+1)
		}
		e.AnnouncedSeq = binary.BigEndian.Uint32(p[1:])
		inner, n, err := decodeEvent(p[announcementHeader:], true)
		if err != nil {
			return Event{}, 0, err
		}
		e.Announced = &inner
		return e, announcementHeader + n, nil
	}
	return Event{}, 0, eventErr("unknown kind %d", uint8(k))
}

// DataTypeForEvent returns the data type a BUFFER_RESPONSE carrying e
// has: an aligned barrier blocks upstream (DataAlignedBarrier, or
// DataTimeoutableAlignedBarrier if it may time out), an unaligned barrier
// and an announcement overtake queued data (DataPrioritizedEvent), and
// every other event is a DataEvent.
func DataTypeForEvent(e Event) DataType {
	switch e.Kind {
	case EventBarrier:
		switch e.Barrier.Options.Alignment {
		case barrier.Aligned:
			return DataAlignedBarrier
		case barrier.AlignedWithTimeout:
			return DataTimeoutableAlignedBarrier
		}
		return DataPrioritizedEvent
	case EventAnnouncement:
		return DataPrioritizedEvent
	}
	return DataEvent
}
