package wire

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Fixed body sizes (bytes after the type byte).
const (
	helloFixedBody        = 6  // version, flags, token length
	helloAckBody          = 2  // version
	partitionRequestBody  = 40 // partition, subpartition, receiver, credit
	receiverU32Body       = 20 // receiver + u32 (ADD_CREDIT, NEW_BUFFER_SIZE, BACKLOG_ANNOUNCEMENT)
	receiverBody          = 16 // receiver (RESUME_CONSUMPTION, CANCEL_PARTITION)
	closeBody             = 0
	bufferResponseFixed   = 28 // receiver, sequence, backlog, data type, flags, partial count
	errorResponseFixed    = 19 // receiver, class, message length
	maxU16                = 1<<16 - 1
	largestFixedFrameBody = partitionRequestBody
)

// appendHeader appends length, magic and type for a frame whose body is
// bodyLen bytes long.
func appendHeader(dst []byte, t MessageType, bodyLen int) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(5+bodyLen))
	dst = binary.BigEndian.AppendUint32(dst, Magic)
	return append(dst, byte(t))
}

// AppendHello appends a HELLO frame. It panics if the token is longer than
// 65535 bytes.
func AppendHello(dst []byte, m Hello) []byte {
	if len(m.Token) > maxU16 {
		panic(fmt.Sprintf("wire: HELLO token of %d bytes exceeds %d", len(m.Token), maxU16))
	}
	dst = appendHeader(dst, TypeHello, helloFixedBody+len(m.Token))
	dst = binary.BigEndian.AppendUint16(dst, m.Version)
	dst = binary.BigEndian.AppendUint16(dst, m.Flags)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(m.Token)))
	return append(dst, m.Token...)
}

// AppendHelloAck appends a HELLO_ACK frame.
func AppendHelloAck(dst []byte, m HelloAck) []byte {
	dst = appendHeader(dst, TypeHelloAck, helloAckBody)
	return binary.BigEndian.AppendUint16(dst, m.Version)
}

// AppendPartitionRequest appends a PARTITION_REQUEST frame.
func AppendPartitionRequest(dst []byte, m PartitionRequest) []byte {
	dst = appendHeader(dst, TypePartitionRequest, partitionRequestBody)
	dst = append(dst, m.Partition[:]...)
	dst = binary.BigEndian.AppendUint32(dst, m.Subpartition)
	dst = append(dst, m.Receiver[:]...)
	return binary.BigEndian.AppendUint32(dst, m.InitialCredit)
}

func appendReceiverU32(dst []byte, t MessageType, r uuid.UUID, v uint32) []byte {
	dst = appendHeader(dst, t, receiverU32Body)
	dst = append(dst, r[:]...)
	return binary.BigEndian.AppendUint32(dst, v)
}

func appendReceiver(dst []byte, t MessageType, r uuid.UUID) []byte {
	dst = appendHeader(dst, t, receiverBody)
	return append(dst, r[:]...)
}

// AppendAddCredit appends an ADD_CREDIT frame.
func AppendAddCredit(dst []byte, m AddCredit) []byte {
	return appendReceiverU32(dst, TypeAddCredit, m.Receiver, m.Credit)
}

// AppendResumeConsumption appends a RESUME_CONSUMPTION frame.
func AppendResumeConsumption(dst []byte, m ResumeConsumption) []byte {
	return appendReceiver(dst, TypeResumeConsumption, m.Receiver)
}

// AppendCancelPartition appends a CANCEL_PARTITION frame.
func AppendCancelPartition(dst []byte, m CancelPartition) []byte {
	return appendReceiver(dst, TypeCancelPartition, m.Receiver)
}

// AppendClose appends a CLOSE frame.
func AppendClose(dst []byte) []byte {
	return appendHeader(dst, TypeClose, closeBody)
}

// AppendNewBufferSize appends a NEW_BUFFER_SIZE frame.
func AppendNewBufferSize(dst []byte, m NewBufferSize) []byte {
	return appendReceiverU32(dst, TypeNewBufferSize, m.Receiver, m.Size)
}

// AppendBufferResponseHeader appends a BUFFER_RESPONSE frame up to and
// including its size field; the frame's length counts the h.Size payload
// bytes, which the caller writes right after (straight from its buffer).
// It panics if h is inconsistent: more than 65535 partials, partial sizes
// not summing to Size, or partials on a type other than DataBuffer.
func AppendBufferResponseHeader(dst []byte, h BufferResponseHeader) []byte {
	k := len(h.Partials)
	if k > 0 {
		if k > maxU16 {
			panic(fmt.Sprintf("wire: %d partial buffers exceed %d", k, maxU16))
		}
		if h.DataType != DataBuffer {
			panic(fmt.Sprintf("wire: partial buffers of data type %s", h.DataType))
		}
		var sum uint64
		for _, s := range h.Partials {
			sum += uint64(s)
		}
		if sum != uint64(h.Size) {
			panic(fmt.Sprintf("wire: partial sizes sum to %d, size is %d", sum, h.Size))
		}
	}
	dst = appendHeader(dst, TypeBufferResponse, bufferResponseFixed+4*k+4+int(h.Size))
	dst = append(dst, h.Receiver[:]...)
	dst = binary.BigEndian.AppendUint32(dst, h.Sequence)
	dst = binary.BigEndian.AppendUint32(dst, uint32(h.Backlog))
	dst = append(dst, byte(h.DataType), h.Flags)
	dst = binary.BigEndian.AppendUint16(dst, uint16(k))
	for _, s := range h.Partials {
		dst = binary.BigEndian.AppendUint32(dst, s)
	}
	return binary.BigEndian.AppendUint32(dst, h.Size)
}

// AppendBufferResponse appends a complete BUFFER_RESPONSE frame, copying
// payload, whose length must equal h.Size. Use AppendBufferResponseHeader
// on the hot path to avoid the copy.
func AppendBufferResponse(dst []byte, h BufferResponseHeader, payload []byte) []byte {
	if len(payload) != int(h.Size) {
		panic(fmt.Sprintf("wire: payload of %d bytes, size is %d", len(payload), h.Size))
	}
	return append(AppendBufferResponseHeader(dst, h), payload...)
}

// AppendBacklogAnnouncement appends a BACKLOG_ANNOUNCEMENT frame.
func AppendBacklogAnnouncement(dst []byte, m BacklogAnnouncement) []byte {
	return appendReceiverU32(dst, TypeBacklogAnnouncement, m.Receiver, m.Backlog)
}

// AppendErrorResponse appends an ERROR_RESPONSE frame. A message that is
// not valid UTF-8 has its invalid bytes replaced by U+FFFD, and a message
// longer than 65535 bytes is cut at a rune boundary.
func AppendErrorResponse(dst []byte, m ErrorResponse) []byte {
	msg := m.Message
	if !utf8.ValidString(msg) {
		msg = strings.ToValidUTF8(msg, "\uFFFD")
	}
	if len(msg) > maxU16 {
		n := maxU16
		for n > 0 && !utf8.RuneStart(msg[n]) {
			n--
		}
		msg = msg[:n]
	}
	dst = appendHeader(dst, TypeErrorResponse, errorResponseFixed+len(msg))
	dst = append(dst, m.Receiver[:]...)
	dst = append(dst, byte(m.Class))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(msg)))
	return append(dst, msg...)
}
