package network

import (
	"encoding/binary"
	"fmt"

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
	buf *buffer.Buffer // current buffer, nil until the first record
	seg []byte         // buf's whole segment
	pos int            // bytes written into seg
}

// room is the free space in the current buffer.
func (b *builder) room() int { return len(b.seg) - b.pos }

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

	buf  *buffer.Buffer // current buffer (owned), nil when none
	data []byte         // buf's bytes
	pos  int

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
	d.data = b.Bytes()
	d.pos = 0
}

// HasBuffer reports whether the deserializer still holds an unread buffer.
func (d *Deserializer) HasBuffer() bool { return d.buf != nil }

// Pending reports whether a record spanning buffers is incomplete.
func (d *Deserializer) Pending() bool { return d.partial }

// Next returns the next complete record. The slice is valid until the next
// call to Next or SetBuffer. ok is false when the current buffer is used up
// (the record may continue in the next buffer). A corrupt length fails with
// a *DeserializeError.
func (d *Deserializer) Next() (rec []byte, ok bool, err error) {
	if d.buf == nil {
		return nil, false, nil
	}
	if !d.partial {
		// Fast path: a whole record inside the current buffer.
		if rem := len(d.data) - d.pos; rem >= lengthSize {
			n := int(binary.BigEndian.Uint32(d.data[d.pos:]))
			if n > d.maxSize {
				return nil, false, d.corrupt(n)
			}
			if rem-lengthSize >= n {
				start := d.pos + lengthSize
				d.pos = start + n
				// The buffer is released on the next call: rec aliases it.
				return d.data[start:d.pos:d.pos], true, nil
			}
		}
		if d.pos == len(d.data) {
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
		if d.pos == len(d.data) {
			d.release()
			return nil, false, nil
		}
		if d.lenHave < lengthSize {
			c := copy(d.lenBuf[d.lenHave:], d.data[d.pos:])
			d.lenHave += c
			d.pos += c
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
		}
		need := d.recLen - len(d.scratch)
		take := min(need, len(d.data)-d.pos)
		d.scratch = append(d.scratch, d.data[d.pos:d.pos+take]...)
		d.pos += take
		if len(d.scratch) == d.recLen {
			d.partial = false
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
		d.data = nil
		d.pos = 0
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
		dst = append(dst, d.data[d.pos:]...)
	}
	return dst
}

// Close releases any buffer still held and forgets partial records.
func (d *Deserializer) Close() {
	d.release()
	d.partial = false
	d.scratch = d.scratch[:0]
}
