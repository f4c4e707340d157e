package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// ReaderConfig configures a Reader. The zero value means the defaults.
type ReaderConfig struct {
	// MaxFrameSize is the largest frame length field accepted (0 means
	// DefaultMaxFrameSize). It must be at least 45, the length of the
	// largest fixed-size frame, and at most 2^32−1.
	MaxFrameSize int
	// BufferSize is the size of the bufio.Reader wrapped around the
	// connection (0 means DefaultReadBufferSize).
	BufferSize int
}

// minMaxFrameSize is the length of the largest fixed-size frame
// (PARTITION_REQUEST).
const minMaxFrameSize = 5 + largestFixedFrameBody

// Validate reports a configuration value out of range.
func (c ReaderConfig) Validate() error {
	if c.MaxFrameSize != 0 && (c.MaxFrameSize < minMaxFrameSize || uint64(c.MaxFrameSize) > 1<<32-1) {
		return fmt.Errorf("wire: MaxFrameSize %d outside [%d, 2^32-1]", c.MaxFrameSize, minMaxFrameSize)
	}
	if c.BufferSize < 0 {
		return fmt.Errorf("wire: negative BufferSize %d", c.BufferSize)
	}
	return nil
}

// Frame is one decoded frame. Only the field named by Type is meaningful;
// the others hold stale values. A Reader returns its own Frame, valid
// until the next ReadFrame.
type Frame struct {
	Type                MessageType
	Hello               Hello
	HelloAck            HelloAck
	PartitionRequest    PartitionRequest
	AddCredit           AddCredit
	ResumeConsumption   ResumeConsumption
	CancelPartition     CancelPartition
	NewBufferSize       NewBufferSize
	BufferResponse      BufferResponseHeader
	BacklogAnnouncement BacklogAnnouncement
	ErrorResponse       ErrorResponse
}

// Reader decodes the frames that travel in one direction of a connection.
// It validates every frame as docs/protocol.md "Framing" requires and returns a
// *ProtocolError for a frame it rejects. It reads BUFFER_RESPONSE payloads
// only into memory the caller supplies (ReadPayload) and otherwise
// allocates nothing per frame in steady state, except the message of an
// ERROR_RESPONSE.
//
// A Reader is not safe for concurrent use. After any error other than the
// refusal of ReadPayload's caller it returns that same error forever.
type Reader struct {
	br  *bufio.Reader
	dir Direction
	max uint32

	frame    Frame
	scratch  [largestFixedFrameBody]byte
	varBuf   []byte   // HELLO token, ERROR_RESPONSE message, partial sizes
	partials []uint32 // BufferResponse.Partials

	payloadPending bool
	payloadSize    uint32
	err            error // sticky
}

// NewReader returns a Reader of the frames that travel in direction dir,
// read from src. It returns an error if dir is unknown or cfg is invalid.
func NewReader(src io.Reader, dir Direction, cfg ReaderConfig) (*Reader, error) {
	if dir != ServerBound && dir != ClientBound {
		return nil, fmt.Errorf("wire: unknown direction %d", uint8(dir))
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	maxFrame := cfg.MaxFrameSize
	if maxFrame == 0 {
		maxFrame = DefaultMaxFrameSize
	}
	size := cfg.BufferSize
	if size == 0 {
		size = DefaultReadBufferSize
	}
	return &Reader{br: bufio.NewReaderSize(src, size), dir: dir, max: uint32(maxFrame)}, nil
}

// Reset discards all state and makes r read from src, keeping its memory.
func (r *Reader) Reset(src io.Reader) {
	r.br.Reset(src)
	r.payloadPending = false
	r.payloadSize = 0
	r.err = nil
}

// Buffered returns how many bytes are buffered but not yet decoded.
func (r *Reader) Buffered() int { return r.br.Buffered() }

func (r *Reader) fail(err error) error {
	r.err = err
	return err
}

// readFull reads exactly len(p) bytes of the frame of type t (0 while the
// type is still unknown). Any end of input here is a truncated frame.
func (r *Reader) readFull(t MessageType, p []byte) error {
	if _, err := io.ReadFull(r.br, p); err != nil {
		return r.fail(readErr(t, err))
	}
	return nil
}

func readErr(t MessageType, err error) error {
	what := "frame"
	if t != 0 {
		what = t.String() + " frame"
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("wire: truncated %s: %w", what, io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("wire: reading %s: %w", what, err)
}

// ReadFrame reads and validates the next frame. It returns io.EOF if the
// input ends cleanly between frames, an error wrapping
// io.ErrUnexpectedEOF if it ends inside a frame, and a *ProtocolError if
// the frame violates docs/protocol.md.
//
// For a BUFFER_RESPONSE, ReadFrame returns after the header; the caller
// then calls ReadPayload or DiscardPayload. A payload still unread when
// ReadFrame is called again is discarded.
//
// The returned Frame (and the slices in it) belongs to r and is valid until
// the next call of ReadFrame.
func (r *Reader) ReadFrame() (*Frame, error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.payloadPending {
		if err := r.DiscardPayload(); err != nil {
			return nil, err
		}
	}
	s := r.scratch[:]
	if _, err := io.ReadFull(r.br, s[:4]); err != nil {
		if err == io.EOF {
			return nil, r.fail(io.EOF)
		}
		return nil, r.fail(readErr(0, err))
	}
	length := binary.BigEndian.Uint32(s)
	if length < 5 {
		return nil, r.fail(protoErr(0, "frame length %d below 5", length))
	}
	if length > r.max {
		return nil, r.fail(protoErr(0, "frame length %d exceeds maximum %d", length, r.max))
	}
	if err := r.readFull(0, s[:5]); err != nil {
		return nil, err
	}
	if m := binary.BigEndian.Uint32(s); m != Magic {
		return nil, r.fail(protoErr(0, "magic 0x%08x, want 0x%08x", m, Magic))
	}
	t := MessageType(s[4])
	switch d := t.Direction(); {
	case d == 0:
		return nil, r.fail(protoErr(0, "unknown type 0x%02x", uint8(t)))
	case d != r.dir:
		return nil, r.fail(protoErr(t, "type 0x%02x is not defined %s", uint8(t), r.dir))
	}
	body := length - 5
	f := &r.frame
	f.Type = t
	var err error
	switch t {
	case TypeHello:
		err = r.readHello(body)
	case TypeErrorResponse:
		err = r.readErrorResponse(body)
	case TypeBufferResponse:
		err = r.readBufferResponse(body)
	default:
		err = r.readFixed(t, body)
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

func fixedBody(t MessageType) uint32 {
	switch t {
	case TypeHelloAck:
		return helloAckBody
	case TypePartitionRequest:
		return partitionRequestBody
	case TypeAddCredit, TypeNewBufferSize, TypeBacklogAnnouncement:
		return receiverU32Body
	case TypeResumeConsumption, TypeCancelPartition:
		return receiverBody
	}
	return closeBody // TypeClose
}

func (r *Reader) readFixed(t MessageType, body uint32) error {
	if want := fixedBody(t); body != want {
		return r.fail(protoErr(t, "body of %d bytes, want %d", body, want))
	}
	s := r.scratch[:body]
	if err := r.readFull(t, s); err != nil {
		return err
	}
	f := &r.frame
	switch t {
	case TypeHelloAck:
		f.HelloAck = HelloAck{Version: binary.BigEndian.Uint16(s)}
	case TypePartitionRequest:
		m := &f.PartitionRequest
		copy(m.Partition[:], s[0:16])
		m.Subpartition = binary.BigEndian.Uint32(s[16:])
		copy(m.Receiver[:], s[20:36])
		m.InitialCredit = binary.BigEndian.Uint32(s[36:])
	case TypeAddCredit:
		copy(f.AddCredit.Receiver[:], s)
		f.AddCredit.Credit = binary.BigEndian.Uint32(s[16:])
	case TypeNewBufferSize:
		copy(f.NewBufferSize.Receiver[:], s)
		f.NewBufferSize.Size = binary.BigEndian.Uint32(s[16:])
	case TypeBacklogAnnouncement:
		copy(f.BacklogAnnouncement.Receiver[:], s)
		f.BacklogAnnouncement.Backlog = binary.BigEndian.Uint32(s[16:])
	case TypeResumeConsumption:
		copy(f.ResumeConsumption.Receiver[:], s)
	case TypeCancelPartition:
		copy(f.CancelPartition.Receiver[:], s)
	}
	return nil
}

// varBytes returns r.varBuf grown to n bytes. n is bounded by the frame
// length, which was checked against the maximum.
func (r *Reader) varBytes(n int) []byte {
	if cap(r.varBuf) < n {
		r.varBuf = make([]byte, n)
	}
	return r.varBuf[:n]
}

func (r *Reader) readHello(body uint32) error {
	const t = TypeHello
	if body < helloFixedBody {
		return r.fail(protoErr(t, "body of %d bytes, want at least %d", body, helloFixedBody))
	}
	s := r.scratch[:helloFixedBody]
	if err := r.readFull(t, s); err != nil {
		return err
	}
	m := &r.frame.Hello
	m.Version = binary.BigEndian.Uint16(s)
	m.Flags = binary.BigEndian.Uint16(s[2:])
	n := binary.BigEndian.Uint16(s[4:])
	if uint32(n) != body-helloFixedBody {
		return r.fail(protoErr(t, "token length %d, but %d bytes follow", n, body-helloFixedBody))
	}
	if m.Flags&^FlagCompressed != 0 {
		return r.fail(protoErr(t, "flags 0x%04x: bits other than bit 0 set", m.Flags))
	}
	m.Token = r.varBytes(int(n))
	return r.readFull(t, m.Token)
}

func (r *Reader) readErrorResponse(body uint32) error {
	const t = TypeErrorResponse
	if body < errorResponseFixed {
		return r.fail(protoErr(t, "body of %d bytes, want at least %d", body, errorResponseFixed))
	}
	s := r.scratch[:errorResponseFixed]
	if err := r.readFull(t, s); err != nil {
		return err
	}
	m := &r.frame.ErrorResponse
	copy(m.Receiver[:], s)
	m.Class = ErrorClass(s[16])
	n := binary.BigEndian.Uint16(s[17:])
	if uint32(n) != body-errorResponseFixed {
		return r.fail(protoErr(t, "message length %d, but %d bytes follow", n, body-errorResponseFixed))
	}
	msg := r.varBytes(int(n))
	if err := r.readFull(t, msg); err != nil {
		return err
	}
	if !utf8.Valid(msg) {
		return r.fail(protoErr(t, "message is not valid UTF-8"))
	}
	m.Message = string(msg)
	return nil
}

func (r *Reader) readBufferResponse(body uint32) error {
	const t = TypeBufferResponse
	if body < bufferResponseFixed+4 {
		return r.fail(protoErr(t, "body of %d bytes, want at least %d", body, bufferResponseFixed+4))
	}
	s := r.scratch[:bufferResponseFixed]
	if err := r.readFull(t, s); err != nil {
		return err
	}
	h := &r.frame.BufferResponse
	copy(h.Receiver[:], s)
	h.Sequence = binary.BigEndian.Uint32(s[16:])
	h.Backlog = int32(binary.BigEndian.Uint32(s[20:]))
	h.DataType = DataType(s[24])
	h.Flags = s[25]
	k := uint32(binary.BigEndian.Uint16(s[26:]))
	if h.Backlog < 0 {
		return r.fail(protoErr(t, "negative backlog %d", h.Backlog))
	}
	if !h.DataType.Valid() {
		return r.fail(protoErr(t, "unknown data type %d", uint8(h.DataType)))
	}
	if k > 0 && h.DataType != DataBuffer {
		return r.fail(protoErr(t, "%d partial buffers of data type %s", k, h.DataType))
	}
	if need := bufferResponseFixed + 4*k + 4; need > body {
		return r.fail(protoErr(t, "partial count %d needs at least %d body bytes, body has %d", k, need, body))
	}
	// Partial sizes and the size field, read in one go.
	raw := r.varBytes(int(4*k + 4))
	if err := r.readFull(t, raw); err != nil {
		return err
	}
	if cap(r.partials) < int(k) {
		r.partials = make([]uint32, k)
	}
	h.Partials = r.partials[:k]
	var sum uint64
	for i := range h.Partials {
		h.Partials[i] = binary.BigEndian.Uint32(raw[4*i:])
		sum += uint64(h.Partials[i])
	}
	h.Size = binary.BigEndian.Uint32(raw[4*k:])
	if want := body - (bufferResponseFixed + 4*k + 4); h.Size != want {
		return r.fail(protoErr(t, "size %d, but %d payload bytes follow", h.Size, want))
	}
	if k > 0 && sum != uint64(h.Size) {
		return r.fail(protoErr(t, "partial sizes sum to %d, size is %d", sum, h.Size))
	}
	r.payloadPending = true
	r.payloadSize = h.Size
	return nil
}

// errNoPayload is returned by ReadPayload and DiscardPayload when no
// BUFFER_RESPONSE payload is pending: a bug of the caller.
var errNoPayload = errors.New("wire: no BUFFER_RESPONSE payload pending")

// ReadPayload reads the payload of the BUFFER_RESPONSE that ReadFrame just
// returned into dst[:Size]. If dst is shorter than Size the caller refuses
// the frame: ReadPayload returns (and keeps returning) a *ProtocolError.
func (r *Reader) ReadPayload(dst []byte) error {
	if r.err != nil {
		return r.err
	}
	if !r.payloadPending {
		return errNoPayload
	}
	n := r.payloadSize
	if uint64(len(dst)) < uint64(n) {
		return r.fail(protoErr(TypeBufferResponse, "payload of %d bytes exceeds the %d-byte buffer", n, len(dst)))
	}
	r.payloadPending = false
	return r.readFull(TypeBufferResponse, dst[:n])
}

// DiscardPayload skips the payload of the BUFFER_RESPONSE that ReadFrame
// just returned (a buffer for a receiver already released).
func (r *Reader) DiscardPayload() error {
	if r.err != nil {
		return r.err
	}
	if !r.payloadPending {
		return errNoPayload
	}
	r.payloadPending = false
	if _, err := r.br.Discard(int(r.payloadSize)); err != nil {
		return r.fail(readErr(TypeBufferResponse, err))
	}
	return nil
}
