package barrier

import (
	"fmt"
	"time"
)

// CheckpointID identifies one checkpoint (or savepoint) of a job. IDs grow
// strictly: a larger ID is a newer checkpoint. Zero is never a valid ID.
type CheckpointID uint64

// ChannelIndex is the position of one input channel within a task's input
// gate(s), 0..N-1.
type ChannelIndex int

// Mode is the checkpointing guarantee.
type Mode uint8

const (
	// ExactlyOnce aligns barriers: a channel that delivered barrier N is
	// blocked until every channel delivered N.
	ExactlyOnce Mode = iota
	// AtLeastOnce tracks barriers without blocking any channel.
	AtLeastOnce
)

func (m Mode) String() string {
	switch m {
	case ExactlyOnce:
		return "exactly-once"
	case AtLeastOnce:
		return "at-least-once"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Kind says whether a barrier is a regular checkpoint or a savepoint
// (docs/protocol.md "Events", the barrier's "type" field).
type Kind uint8

const (
	Checkpoint Kind = 0
	Savepoint  Kind = 1
)

func (k Kind) String() string {
	if k == Savepoint {
		return "savepoint"
	}
	return "checkpoint"
}

// Alignment is how a barrier is aligned (docs/protocol.md "Events", the
// barrier's "alignment" field).
type Alignment uint8

const (
	Aligned            Alignment = 0
	Unaligned          Alignment = 1
	AlignedWithTimeout Alignment = 2
)

func (a Alignment) String() string {
	switch a {
	case Aligned:
		return "aligned"
	case Unaligned:
		return "unaligned"
	case AlignedWithTimeout:
		return "aligned with timeout"
	}
	return fmt.Sprintf("Alignment(%d)", uint8(a))
}

// Options travel with every barrier of one checkpoint.
type Options struct {
	Kind             Kind
	Alignment        Alignment
	AlignmentTimeout time.Duration // only for AlignedWithTimeout
}

// Barrier is a checkpoint barrier: it separates the records that belong to
// checkpoint ID from those that belong to the next one.
type Barrier struct {
	ID        CheckpointID
	Timestamp int64 // unix milliseconds at which the coordinator triggered it
	Options   Options
}

func (b Barrier) String() string {
	return fmt.Sprintf("barrier{id=%d ts=%d %s}", b.ID, b.Timestamp, b.Options.Kind)
}

// CancelMarker tells downstream tasks that checkpoint ID was abandoned
// upstream, so they stop aligning for it.
type CancelMarker struct {
	ID CheckpointID
}
