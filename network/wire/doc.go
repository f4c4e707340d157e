// Package wire is the frame codec of weir's data-plane TCP protocol
// (docs/protocol.md, version 1), byte for byte.
//
// A frame is one message: a big-endian uint32 length (bytes that follow
// it), the magic 0x57454952 ("WEIR"), a type byte and a body whose layout
// the type defines. Client→server frames (ServerBound) are HELLO,
// PARTITION_REQUEST, ADD_CREDIT, RESUME_CONSUMPTION, CANCEL_PARTITION,
// CLOSE and NEW_BUFFER_SIZE; server→client frames (ClientBound) are
// HELLO_ACK, BUFFER_RESPONSE, BACKLOG_ANNOUNCEMENT and ERROR_RESPONSE.
//
// Encoding: the Append* functions append one complete frame to a byte
// slice and allocate nothing when it has room. AppendBufferResponseHeader
// writes a BUFFER_RESPONSE up to its size field, so the writer sends the
// payload straight from its pooled buffer.
//
// Decoding: a Reader reads the frames of one direction from an io.Reader
// and validates each as docs/protocol.md requires (length, checked before
// anything is allocated; magic; type and direction; body length and the
// lengths inside it; HELLO flags), returning a *ProtocolError for a frame
// it rejects, io.EOF at a clean end between frames and an error wrapping
// io.ErrUnexpectedEOF for a frame cut off. A BUFFER_RESPONSE payload is
// read only into memory the caller passes to ReadPayload.
//
// Events: AppendEvent and DecodeEvent encode the event payloads
// (checkpoint barrier, cancel marker, end of partition, end of data,
// watermark, event announcement); DataTypeForEvent names the data type a
// BUFFER_RESPONSE carrying an event has.
//
// The package holds no state between frames beyond a Reader and does no
// I/O of its own beyond reading from the io.Reader it is given.
package wire
