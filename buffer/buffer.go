package buffer

import (
	"fmt"
	"sync/atomic"
)

// DataType says what a Buffer carries. The values are the data types of
// docs/protocol.md ("Data types"), so a Buffer's type travels on the wire
// unchanged.
type DataType uint8

const (
	// Data is a buffer of serialized records.
	Data DataType = 0
	// Event is a serialized event (end of partition, cancel marker, …).
	Event DataType = 1
	// PriorityEvent is an event that overtakes queued data (unaligned
	// barriers).
	PriorityEvent DataType = 2
	// AlignedBarrier is an aligned checkpoint barrier: the producer sends
	// nothing more on the channel until the consumer resumes it.
	AlignedBarrier DataType = 3
	// TimeoutableAlignedBarrier is an aligned barrier that may later be
	// turned unaligned; it blocks like AlignedBarrier.
	TimeoutableAlignedBarrier DataType = 4
)

// IsData reports whether t is a data buffer (the only type that needs
// credit).
func (t DataType) IsData() bool { return t == Data }

// BlocksUpstream reports whether, after a buffer of type t, the producer
// must stop sending until the consumer resumes consumption.
func (t DataType) BlocksUpstream() bool {
	return t == AlignedBarrier || t == TimeoutableAlignedBarrier
}

// Valid reports whether t is a known data type.
func (t DataType) Valid() bool { return t <= TimeoutableAlignedBarrier }

func (t DataType) String() string {
	switch t {
	case Data:
		return "data"
	case Event:
		return "event"
	case PriorityEvent:
		return "priority-event"
	case AlignedBarrier:
		return "aligned-barrier"
	case TimeoutableAlignedBarrier:
		return "timeoutable-aligned-barrier"
	}
	return fmt.Sprintf("DataType(%d)", uint8(t))
}

// Recycler takes back a Buffer's memory when its last reference is
// released.
type Recycler interface {
	Recycle(b *Buffer)
}

// Buffer is a reference-counted view of one memory segment: bytes [0, Len)
// of the segment hold data. A Buffer is created with one reference; Retain
// adds one, Release drops one, and the last Release hands the segment back
// to its Recycler. A slice (Slice) shares its parent's reference count.
//
// A Buffer is owned by one goroutine at a time; handing it over (through a
// queue) transfers ownership. Releasing a Buffer twice, or touching it after
// its last release, is a bug and panics.
type Buffer struct {
	seg      []byte // the whole segment (capacity)
	n        int    // bytes written
	refs     atomic.Int32
	recycler Recycler
	typ      DataType
	parent   *Buffer // non-nil for a slice; references live on the parent
	off      int     // slice offset into parent.seg
}

// Wrap makes an unpooled Buffer over p (all of p is data) of type t.
// Nothing recycles it: the garbage collector takes it after the last
// Release. Events use unpooled buffers.
func Wrap(p []byte, t DataType) *Buffer {
	b := &Buffer{seg: p, n: len(p), typ: t}
	b.refs.Store(1)
	return b
}

func (b *Buffer) root() *Buffer {
	if b.parent != nil {
		return b.parent
	}
	return b
}

func (b *Buffer) check() {
	if r := b.root().refs.Load(); r <= 0 {
		panic(fmt.Sprintf("buffer: use after release (refs=%d, type=%s, len=%d)", r, b.typ, b.n))
	}
}

// Bytes returns the written bytes [0, Len). The slice is valid until the
// Buffer's last Release.
func (b *Buffer) Bytes() []byte {
	b.check()
	return b.seg[:b.n]
}

// Segment returns the whole underlying memory, [0, Cap), for writing.
func (b *Buffer) Segment() []byte {
	b.check()
	return b.seg
}

// Len is the number of bytes written.
func (b *Buffer) Len() int { return b.n }

// Cap is the segment's size.
func (b *Buffer) Cap() int { return len(b.seg) }

// SetLen sets the number of written bytes. It panics if n is outside
// [0, Cap].
func (b *Buffer) SetLen(n int) {
	if n < 0 || n > len(b.seg) {
		panic(fmt.Sprintf("buffer: SetLen(%d) outside [0, %d]", n, len(b.seg)))
	}
	b.n = n
}

// Type is what the buffer carries.
func (b *Buffer) Type() DataType { return b.typ }

// SetType sets what the buffer carries.
func (b *Buffer) SetType(t DataType) { b.typ = t }

// IsData reports whether the buffer holds records.
func (b *Buffer) IsData() bool { return b.typ == Data }

// Refs is the current reference count (shared with slices); for tests and
// assertions.
func (b *Buffer) Refs() int32 { return b.root().refs.Load() }

// Retain adds a reference and returns b.
func (b *Buffer) Retain() *Buffer {
	r := b.root()
	if n := r.refs.Add(1); n <= 1 {
		panic(fmt.Sprintf("buffer: retain after release (refs=%d)", n))
	}
	return b
}

// Release drops a reference; the last one recycles the segment.
func (b *Buffer) Release() {
	r := b.root()
	n := r.refs.Add(-1)
	switch {
	case n < 0:
		panic(fmt.Sprintf("buffer: released twice (refs=%d, type=%s, len=%d)", n, r.typ, r.n))
	case n == 0 && r.recycler != nil:
		r.recycler.Recycle(r)
	}
}

// Slice returns a zero-copy view of bytes [off, off+n) of b's written data,
// as a Buffer of type t that shares b's reference count. The slice takes a
// reference of its own: release both b and the slice.
func (b *Buffer) Slice(off, n int, t DataType) *Buffer {
	b.check()
	if off < 0 || n < 0 || off+n > b.n {
		panic(fmt.Sprintf("buffer: Slice(%d, %d) outside [0, %d]", off, n, b.n))
	}
	r := b.root()
	base := b.off
	r.refs.Add(1)
	return &Buffer{seg: r.seg[base+off : base+off+n], n: n, typ: t, parent: r, off: base + off}
}
