package wire

import (
	"fmt"

	"github.com/google/uuid"
)

// Frame layout constants (docs/protocol.md "Framing").
const (
	// Magic is the second field of every frame: "WEIR".
	Magic uint32 = 0x57454952
	// Version is the protocol version this package speaks.
	Version uint16 = 1
	// DefaultMaxFrameSize is the largest frame length (the value of the
	// length field) a Reader accepts unless configured otherwise.
	DefaultMaxFrameSize = 4 << 20
	// DefaultReadBufferSize is the size of a Reader's bufio.Reader unless
	// configured otherwise.
	DefaultReadBufferSize = 128 << 10
	// HeaderSize is the size of length + magic + type.
	HeaderSize = 9
	// MaxCredit is the largest credit a receiver may hold (2^31−1).
	MaxCredit = 1<<31 - 1
)

// FlagCompressed is bit 0 of HELLO flags (the client accepts compressed
// payloads) and of BUFFER_RESPONSE flags (this payload is compressed).
const FlagCompressed = 1 << 0

// MessageType is the type byte of a frame.
type MessageType uint8

// The message types of docs/protocol.md "Messages".
const (
	TypeHello               MessageType = 0x01 // c→s
	TypeHelloAck            MessageType = 0x02 // s→c
	TypePartitionRequest    MessageType = 0x10 // c→s
	TypeAddCredit           MessageType = 0x11 // c→s
	TypeResumeConsumption   MessageType = 0x12 // c→s
	TypeCancelPartition     MessageType = 0x13 // c→s
	TypeClose               MessageType = 0x14 // c→s
	TypeNewBufferSize       MessageType = 0x15 // c→s
	TypeBufferResponse      MessageType = 0x20 // s→c
	TypeBacklogAnnouncement MessageType = 0x21 // s→c
	TypeErrorResponse       MessageType = 0x22 // s→c
)

func (t MessageType) String() string {
	switch t {
	case TypeHello:
		return "HELLO"
	case TypeHelloAck:
		return "HELLO_ACK"
	case TypePartitionRequest:
		return "PARTITION_REQUEST"
	case TypeAddCredit:
		return "ADD_CREDIT"
	case TypeResumeConsumption:
		return "RESUME_CONSUMPTION"
	case TypeCancelPartition:
		return "CANCEL_PARTITION"
	case TypeClose:
		return "CLOSE"
	case TypeNewBufferSize:
		return "NEW_BUFFER_SIZE"
	case TypeBufferResponse:
		return "BUFFER_RESPONSE"
	case TypeBacklogAnnouncement:
		return "BACKLOG_ANNOUNCEMENT"
	case TypeErrorResponse:
		return "ERROR_RESPONSE"
	}
	return fmt.Sprintf("type 0x%02x", uint8(t))
}

// Direction says which way a frame travels, and so which types a Reader
// accepts.
type Direction uint8

const (
	// ServerBound frames travel client→server: the server reads them.
	ServerBound Direction = 1
	// ClientBound frames travel server→client: the client reads them.
	ClientBound Direction = 2
)

func (d Direction) String() string {
	switch d {
	case ServerBound:
		return "client→server"
	case ClientBound:
		return "server→client"
	}
	return fmt.Sprintf("Direction(%d)", uint8(d))
}

// Direction reports which way frames of type t travel, or 0 for an unknown
// type.
func (t MessageType) Direction() Direction {
	switch t {
	case TypeHello, TypePartitionRequest, TypeAddCredit, TypeResumeConsumption,
		TypeCancelPartition, TypeClose, TypeNewBufferSize:
		return ServerBound
	case TypeHelloAck, TypeBufferResponse, TypeBacklogAnnouncement, TypeErrorResponse:
		return ClientBound
	}
	return 0
}

// ErrorClass is the class of an ERROR_RESPONSE.
type ErrorClass uint8

const (
	ClassGeneric           ErrorClass = 0
	ClassPartitionNotFound ErrorClass = 1
	ClassProtocol          ErrorClass = 2
	ClassUnauthenticated   ErrorClass = 3
	ClassProducerFailed    ErrorClass = 4
)

func (c ErrorClass) String() string {
	switch c {
	case ClassGeneric:
		return "generic"
	case ClassPartitionNotFound:
		return "partition-not-found"
	case ClassProtocol:
		return "protocol"
	case ClassUnauthenticated:
		return "unauthenticated"
	case ClassProducerFailed:
		return "producer-failed"
	}
	return fmt.Sprintf("ErrorClass(%d)", uint8(c))
}

// DataType is the data type of a BUFFER_RESPONSE. The values equal
// buffer.DataType's.
type DataType uint8

const (
	// DataBuffer is a buffer of serialized records; it takes one credit.
	DataBuffer DataType = 0
	// DataEvent is an event.
	DataEvent DataType = 1
	// DataPrioritizedEvent overtakes queued data (unaligned barriers).
	DataPrioritizedEvent DataType = 2
	// DataAlignedBarrier is an aligned checkpoint barrier: it blocks
	// upstream until RESUME_CONSUMPTION.
	DataAlignedBarrier DataType = 3
	// DataTimeoutableAlignedBarrier blocks upstream like DataAlignedBarrier
	// and may be turned unaligned.
	DataTimeoutableAlignedBarrier DataType = 4
)

// Valid reports whether t is one of the five data types.
func (t DataType) Valid() bool { return t <= DataTimeoutableAlignedBarrier }

// IsData reports whether t is a data buffer (the only type that takes
// credit).
func (t DataType) IsData() bool { return t == DataBuffer }

// BlocksUpstream reports whether the server sends nothing more to the
// receiver after a buffer of type t until RESUME_CONSUMPTION.
func (t DataType) BlocksUpstream() bool {
	return t == DataAlignedBarrier || t == DataTimeoutableAlignedBarrier
}

func (t DataType) String() string {
	switch t {
	case DataBuffer:
		return "data"
	case DataEvent:
		return "event"
	case DataPrioritizedEvent:
		return "prioritized-event"
	case DataAlignedBarrier:
		return "aligned-barrier"
	case DataTimeoutableAlignedBarrier:
		return "timeoutable-aligned-barrier"
	}
	return fmt.Sprintf("DataType(%d)", uint8(t))
}

// Hello is the client's first frame.
type Hello struct {
	Version uint16
	Flags   uint16 // only FlagCompressed may be set
	// Token authenticates the client. A Reader's Token aliases its scratch
	// memory and is valid until the next ReadFrame.
	Token []byte
}

// HelloAck is the server's answer to Hello.
type HelloAck struct {
	Version uint16
}

// PartitionRequest asks for one subpartition on behalf of one input channel.
type PartitionRequest struct {
	Partition     uuid.UUID
	Subpartition  uint32
	Receiver      uuid.UUID
	InitialCredit uint32
}

// AddCredit grants the server more credit for one receiver.
type AddCredit struct {
	Receiver uuid.UUID
	Credit   uint32
}

// ResumeConsumption unblocks a receiver after an aligned barrier.
type ResumeConsumption struct {
	Receiver uuid.UUID
}

// CancelPartition releases a receiver's reader early.
type CancelPartition struct {
	Receiver uuid.UUID
}

// NewBufferSize tells the server the buffer size a receiver wants.
type NewBufferSize struct {
	Receiver uuid.UUID
	Size     uint32
}

// BufferResponseHeader is everything of a BUFFER_RESPONSE but its payload.
type BufferResponseHeader struct {
	Receiver uuid.UUID
	Sequence uint32
	Backlog  int32
	DataType DataType
	Flags    uint8
	// Partials lists the sizes of the data buffers packed into the payload
	// of a partial-buffer response (empty for an ordinary one). A Reader's
	// Partials alias its scratch memory and are valid until the next
	// ReadFrame.
	Partials []uint32
	// Size is the payload size in bytes.
	Size uint32
}

// Buffers returns how many buffers (and so sequence numbers) the response
// carries: the partial count, or 1.
func (h *BufferResponseHeader) Buffers() int {
	if len(h.Partials) > 0 {
		return len(h.Partials)
	}
	return 1
}

// BacklogAnnouncement tells the client a receiver's backlog while it has
// no credit.
type BacklogAnnouncement struct {
	Receiver uuid.UUID
	Backlog  uint32
}

// ErrorResponse reports an error for one receiver, or for the whole
// connection when Receiver is the zero UUID.
type ErrorResponse struct {
	Receiver uuid.UUID
	Class    ErrorClass
	Message  string
}

// Fatal reports whether the error is fatal for the connection (zero
// receiver).
func (e *ErrorResponse) Fatal() bool { return e.Receiver == uuid.Nil }

// ProtocolError is a violation of docs/protocol.md by the peer: a frame a
// Reader rejects, or an event payload DecodeEvent rejects. The connection
// must be closed (after a fatal ERROR_RESPONSE of class ClassProtocol, on
// the server side).
type ProtocolError struct {
	// Type is the type of the offending frame, or 0 if the frame was
	// rejected before its type was known (length, magic) or the error is in
	// an event payload.
	Type MessageType
	// Reason says what was wrong.
	Reason string
}

func (e *ProtocolError) Error() string {
	if e.Type == 0 {
		return "wire: protocol error: " + e.Reason
	}
	return "wire: protocol error in " + e.Type.String() + " frame: " + e.Reason
}

func protoErr(t MessageType, format string, args ...any) *ProtocolError {
	return &ProtocolError{Type: t, Reason: fmt.Sprintf(format, args...)}
}
