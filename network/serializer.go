package network

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/weirstream/weir/buffer"
)

// lengthSize is the size of a record's length prefix (docs/protocol.md,
// "Data buffers and records": a u32 length, then the record's bytes).
const lengthSize = 4

// DefaultMaxRecordSize bounds one record. A length prefix above it is
// treated as corruption, so a damaged stream cannot make a consumer
// allocate gigabytes.
const DefaultMaxRecordSize = 64 << 20

// builder serializes records into one subpartition's current buffer. A
// record that does not fit continues at the start of the next buffer (its
// length prefix may be split too).
type builder struct {
	seg     []byte         // buf's whole segment, nil without a buffer
	pos     int            // bytes written into seg
	records int64          // records written, for PartitionStats
	buf     *buffer.Buffer // current buffer, nil until the first record
	sub     int            // the subpartition's index
	part    *ResultPartition
	// fit (at least 1) is the room a record is taken to need: the size of
	// the last record that went the spanning way. A record is encoded in
	// place only where that much room is left, so that at the end of a
	// buffer an encoder does not grow (allocate) the slice it was given,
	// only for the record to be encoded again.
	fit int
	// limit is the last position at which a record is encoded in place:
	// len(seg) - lengthSize - fit, negative without a buffer (setSeg,
	// setFit keep it).
	limit int
}

// setSeg makes seg the builder's segment, pos bytes of it written.
func (b *builder) setSeg(buf *buffer.Buffer, seg []byte, pos int) {
	b.buf, b.seg, b.pos = buf, seg, pos
	b.limit = len(seg) - lengthSize - b.fit
}

// setFit sets the room a record is taken to need.
func (b *builder) setFit(fit int) {
	b.fit = max(fit, 1)
	b.limit = len(b.seg) - lengthSize - b.fit
}

// room is the free space in the current buffer.
func (b *builder) room() int { return len(b.seg) - b.pos }

// dst returns the empty slice a record's encoding is appended to in place,
// right after room for its length prefix, and false if less than fit
// bytes of encoding fit.
func (b *builder) dst() ([]byte, bool) {
	if b.pos > b.limit {
		return nil, false
	}
	start := b.pos + lengthSize
	return b.seg[start:start:len(b.seg)], true
}

// commit completes the record whose encoding out was appended to the slice
// dst returned, if it was appended in place, and reports whether it was;
// if not, nothing was written and the caller writes out across buffers.
func (b *builder) commit(out []byte) bool {
	seg, pos, n := b.seg, b.pos, len(out)
	if n > len(seg)-pos-lengthSize || n > 0 && &out[0] != &seg[pos+lengthSize] {
		return false
	}
	binary.BigEndian.PutUint32(seg[pos:pos+lengthSize], uint32(n))
	b.pos = pos + lengthSize + n
	b.records++
	return true
}

// DeserializeError reports a corrupt record stream on one channel.
type DeserializeError struct {
	Channel string // which channel
	Reason  string
}

func (e *DeserializeError) Error() string {
	return fmt.Sprintf("network: corrupt record stream on channel %s: %s", e.Channel, e.Reason)
}

// Deserializer reassembles records from a channel's sequence of data
// buffers. Records that lie wholly inside one buffer are returned as
// slices of it, without copying; a record that spans buffers is assembled
// in a scratch slice that is reused. It is not safe for concurrent use.
type Deserializer struct {
	name    string
	maxSize int

	// data is the current buffer's bytes and off the position of the
	// first unread one. fast is data while Next may take whole records
	// from it without further checks (no record is pending and no record
	// inside the buffer can exceed maxSize), nil otherwise: a record on
	// the fast path moves off, an integer, and stores no slice.
	data []byte
	fast []byte
	off  int
	buf  *buffer.Buffer // current buffer (owned), nil when none

	// a record spanning buffers
	partial bool
	lenBuf  [lengthSize]byte
	lenHave int // bytes of the length prefix collected
	recLen  int
	scratch []byte // collected record bytes, len = collected
}

// NewDeserializer returns a deserializer for the channel called name that
// rejects records longer than maxSize (0 = DefaultMaxRecordSize).
func NewDeserializer(name string, maxSize int) *Deserializer {
	if maxSize <= 0 {
		maxSize = DefaultMaxRecordSize
	}
	return &Deserializer{name: name, maxSize: maxSize}
}

// SetBuffer hands the deserializer the channel's next data buffer; it takes
// over the caller's reference and releases it once every record in it was
// read. The previous buffer must have been fully read (Next returned false).
func (d *Deserializer) SetBuffer(b *buffer.Buffer) {
	if d.buf != nil {
		panic("network: Deserializer.SetBuffer before the previous buffer was consumed")
	}
	d.buf = b
	d.data, d.off = b.Bytes(), 0
	d.toFast()
}

// toFast lets the fast path read the buffer when it may: no record is
// pending, and a record that fits in the buffer fits in maxSize.
func (d *Deserializer) toFast() {
	if !d.partial && d.buf != nil && len(d.data)-lengthSize <= d.maxSize {
		d.fast = d.data
	}
}

// HasBuffer reports whether the deserializer still holds an unread buffer.
func (d *Deserializer) HasBuffer() bool { return d.buf != nil }

// Pending reports whether a record spanning buffers is incomplete.
func (d *Deserializer) Pending() bool { return d.partial }

// Next returns the next complete record. The slice is valid until the next
// call to Next, TryNext or SetBuffer. ok is false when the current buffer
// is used up (the record may continue in the next buffer). A corrupt length
// fails with a *DeserializeError.
func (d *Deserializer) Next() (rec []byte, ok bool, err error) {
	if rec, ok := d.TryNext(); ok {
		return rec, true, nil
	}
	return d.next()
}

// TryNext is Next's fast path alone, small enough to be inlined into a
// consumer's loop: the next record if it lies wholly inside the current
// buffer (and the buffer can hold no record above the maximum size).
// Where it returns false, Next takes over: the end of the buffer, a record
// spanning buffers, a corrupt length. A loop calls TryNext and, when it
// fails, Next.
func (d *Deserializer) TryNext() (rec []byte, ok bool) {
	if f, off := d.fast, d.off; off+lengthSize <= len(f) {
		// Without bounds checks: off is never negative, the length
		// prefix lies inside f (checked above) and so does the record
		// (checked below).
		p := unsafe.Add(unsafe.Pointer(unsafe.SliceData(f)), off)
		n := binary.BigEndian.Uint32((*[lengthSize]byte)(p)[:])
		if uint64(n) <= uint64(len(f)-off-lengthSize) {
			d.off = off + lengthSize + int(n)
			// The buffer is released on a later call: rec aliases it.
			// An empty record is the empty slice at its length prefix,
			// which lies inside the buffer (its end may not).
			if n == 0 {
				return unsafe.Slice((*byte)(p), 0), true
			}
			return unsafe.Slice((*byte)(unsafe.Add(p, lengthSize)), int(n)), true
		}
	}
	return nil, false
}

// Records calls yield with each record that lies wholly in the rest of
// the current buffer, in order, until yield returns false, without
// consuming them: Next returns them still. The rest of a record spanning
// buffers is skipped. It stops at a corrupt length (Next reports it). The
// slices alias the buffer: they are valid until Next moved past them.
func (d *Deserializer) Records(yield func(rec []byte) bool) {
	data, off := d.data, d.off
	if d.buf == nil {
		return
	}
	if d.partial { // skip the rest of the pending record
		need := d.recLen - len(d.scratch)
		if d.lenHave < lengthSize {
			var l [lengthSize]byte
			copy(l[:], d.lenBuf[:d.lenHave])
			if copy(l[d.lenHave:], data[off:]) < lengthSize-d.lenHave {
				return
			}
			off += lengthSize - d.lenHave
			need = int(binary.BigEndian.Uint32(l[:]))
		}
		if need > d.maxSize || need > len(data)-off {
			return
		}
		off += need
	}
	for off+lengthSize <= len(data) {
		n := int(binary.BigEndian.Uint32(data[off:]))
		if n > d.maxSize || n > len(data)-off-lengthSize {
			return
		}
		off += lengthSize
		if !yield(data[off : off+n : off+n]) {
			return
		}
		off += n
	}
}

// next is Next beyond the fast path: the end of the buffer, a record that
// spans buffers, or a buffer that may hold a record above maxSize.
func (d *Deserializer) next() ([]byte, bool, error) {
	if d.buf == nil {
		return nil, false, nil
	}
	d.fast = nil
	if !d.partial {
		if rest := d.data[d.off:]; len(rest) >= lengthSize {
			n := int(binary.BigEndian.Uint32(rest))
			if n > d.maxSize {
				return nil, false, d.corrupt(n)
			}
			if len(rest)-lengthSize >= n {
				d.off += lengthSize + n
				return rest[lengthSize : lengthSize+n : lengthSize+n], true, nil
			}
		}
		if d.off == len(d.data) {
			d.release()
			return nil, false, nil
		}
		d.partial = true
		d.lenHave = 0
		d.scratch = d.scratch[:0]
	}
	return d.nextSpanning()
}

func (d *Deserializer) nextSpanning() ([]byte, bool, error) {
	for {
		rest := d.data[d.off:]
		if len(rest) == 0 {
			d.release()
			return nil, false, nil
		}
		if d.lenHave < lengthSize {
			c := copy(d.lenBuf[d.lenHave:], rest)
			d.lenHave += c
			d.off += c
			if d.lenHave < lengthSize {
				continue
			}
			d.recLen = int(binary.BigEndian.Uint32(d.lenBuf[:]))
			if d.recLen > d.maxSize {
				return nil, false, d.corrupt(d.recLen)
			}
			if cap(d.scratch) < d.recLen {
				d.scratch = make([]byte, 0, d.recLen)
			}
			rest = d.data[d.off:]
		}
		take := min(d.recLen-len(d.scratch), len(rest))
		d.scratch = append(d.scratch, rest[:take]...)
		d.off += take
		if len(d.scratch) == d.recLen {
			d.partial = false
			d.toFast()
			return d.scratch, true, nil
		}
	}
}

func (d *Deserializer) corrupt(n int) error {
	return &DeserializeError{Channel: d.name, Reason: fmt.Sprintf("record length %d exceeds maximum %d", n, d.maxSize)}
}

func (d *Deserializer) release() {
	if d.buf != nil {
		d.buf.Release()
		d.buf = nil
		d.data, d.fast, d.off = nil, nil, 0
	}
}

// AppendUnconsumed appends the bytes the deserializer received but has not
// yet handed out as records: the part of a record spanning buffers it
// collected so far, then the unread rest of its current buffer. Fed to a
// fresh deserializer before the channel's next buffers, they give the same
// records: an unaligned checkpoint's channel state starts with them.
func (d *Deserializer) AppendUnconsumed(dst []byte) []byte {
	if d.partial {
		dst = append(dst, d.lenBuf[:d.lenHave]...)
		if d.lenHave == lengthSize {
			dst = append(dst, d.scratch...)
		}
	}
	if d.buf != nil {
		dst = append(dst, d.data[d.off:]...)
	}
	return dst
}

// Close releases any buffer still held and forgets partial records.
func (d *Deserializer) Close() {
	d.release()
	d.partial = false
	d.scratch = d.scratch[:0]
}
