package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

var (
	recvA = uuid.MustParse("00112233-4455-6677-8899-aabbccddeeff")
	partA = uuid.MustParse("ffeeddcc-bbaa-9988-7766-554433221100")
)

type sample struct {
	name    string
	dir     Direction
	frame   []byte
	payload []byte // BUFFER_RESPONSE only
}

// samples returns one encoded frame of every message type, and a few
// variants.
func samples() []sample {
	br := func(h BufferResponseHeader, p []byte) []byte {
		return AppendBufferResponse(nil, h, p)
	}
	return []sample{
		{name: "hello", dir: ServerBound, frame: AppendHello(nil, Hello{Version: 1, Flags: FlagCompressed, Token: []byte("secret")})},
		{name: "hello-no-token", dir: ServerBound, frame: AppendHello(nil, Hello{Version: 1})},
		{name: "partition-request", dir: ServerBound, frame: AppendPartitionRequest(nil, PartitionRequest{Partition: partA, Subpartition: 7, Receiver: recvA, InitialCredit: 2})},
		{name: "add-credit", dir: ServerBound, frame: AppendAddCredit(nil, AddCredit{Receiver: recvA, Credit: 3})},
		{name: "resume", dir: ServerBound, frame: AppendResumeConsumption(nil, ResumeConsumption{Receiver: recvA})},
		{name: "cancel", dir: ServerBound, frame: AppendCancelPartition(nil, CancelPartition{Receiver: recvA})},
		{name: "close", dir: ServerBound, frame: AppendClose(nil)},
		{name: "new-buffer-size", dir: ServerBound, frame: AppendNewBufferSize(nil, NewBufferSize{Receiver: recvA, Size: 32 << 10})},
		{name: "hello-ack", dir: ClientBound, frame: AppendHelloAck(nil, HelloAck{Version: 1})},
		{name: "buffer", dir: ClientBound, frame: br(BufferResponseHeader{Receiver: recvA, Sequence: 9, Backlog: 4, DataType: DataBuffer, Size: 5}, []byte("hello")), payload: []byte("hello")},
		{name: "buffer-empty", dir: ClientBound, frame: br(BufferResponseHeader{Receiver: recvA, Sequence: 10, DataType: DataEvent, Flags: FlagCompressed}, nil), payload: []byte{}},
		{name: "buffer-partial", dir: ClientBound, frame: br(BufferResponseHeader{Receiver: recvA, Sequence: 11, Backlog: 1, Partials: []uint32{2, 0, 3}, Size: 5}, []byte("abcde")), payload: []byte("abcde")},
		{name: "backlog", dir: ClientBound, frame: AppendBacklogAnnouncement(nil, BacklogAnnouncement{Receiver: recvA, Backlog: 12})},
		{name: "error", dir: ClientBound, frame: AppendErrorResponse(nil, ErrorResponse{Class: ClassProtocol, Message: "bad frame ✗"})},
		{name: "error-empty", dir: ClientBound, frame: AppendErrorResponse(nil, ErrorResponse{Receiver: recvA, Class: ClassPartitionNotFound})},
	}
}

// reencode encodes a decoded frame again.
func reencode(f *Frame, payload []byte) []byte {
	switch f.Type {
	case TypeHello:
		return AppendHello(nil, f.Hello)
	case TypeHelloAck:
		return AppendHelloAck(nil, f.HelloAck)
	case TypePartitionRequest:
		return AppendPartitionRequest(nil, f.PartitionRequest)
	case TypeAddCredit:
		return AppendAddCredit(nil, f.AddCredit)
	case TypeResumeConsumption:
		return AppendResumeConsumption(nil, f.ResumeConsumption)
	case TypeCancelPartition:
		return AppendCancelPartition(nil, f.CancelPartition)
	case TypeClose:
		return AppendClose(nil)
	case TypeNewBufferSize:
		return AppendNewBufferSize(nil, f.NewBufferSize)
	case TypeBufferResponse:
		return AppendBufferResponse(nil, f.BufferResponse, payload)
	case TypeBacklogAnnouncement:
		return AppendBacklogAnnouncement(nil, f.BacklogAnnouncement)
	case TypeErrorResponse:
		return AppendErrorResponse(nil, f.ErrorResponse)
	}
	panic(f.Type)
}

func newReader(t testing.TB, src io.Reader, dir Direction) *Reader {
	t.Helper()
	r, err := NewReader(src, dir, ReaderConfig{})
	require.NoError(t, err)
	return r
}

// readAll decodes frames until an error and returns each frame re-encoded,
// plus the final error.
func readAll(r *Reader) ([][]byte, error) {
	var out [][]byte
	for {
		f, err := r.ReadFrame()
		if err != nil {
			return out, err
		}
		var payload []byte
		if f.Type == TypeBufferResponse {
			payload = make([]byte, f.BufferResponse.Size)
			if err := r.ReadPayload(payload); err != nil {
				return out, err
			}
		}
		out = append(out, reencode(f, payload))
	}
}

func TestRoundTrip(t *testing.T) {
	for _, s := range samples() {
		t.Run(s.name, func(t *testing.T) {
			r := newReader(t, bytes.NewReader(s.frame), s.dir)
			f, err := r.ReadFrame()
			require.NoError(t, err)
			require.Equal(t, MessageType(s.frame[8]), f.Type)
			require.Equal(t, uint32(len(s.frame)-4), binary.BigEndian.Uint32(s.frame))
			var payload []byte
			if f.Type == TypeBufferResponse {
				payload = make([]byte, f.BufferResponse.Size+3) // larger is fine
				require.NoError(t, r.ReadPayload(payload))
				payload = payload[:f.BufferResponse.Size]
				require.Equal(t, s.payload, payload)
			}
			require.Equal(t, s.frame, reencode(f, payload))
			_, err = r.ReadFrame()
			require.ErrorIs(t, err, io.EOF)
		})
	}
}

func TestDecodedFields(t *testing.T) {
	b := AppendPartitionRequest(nil, PartitionRequest{Partition: partA, Subpartition: 7, Receiver: recvA, InitialCredit: 2})
	b = AppendHello(b, Hello{Version: 1, Token: []byte("tok")})
	r := newReader(t, bytes.NewReader(b), ServerBound)
	f, err := r.ReadFrame()
	require.NoError(t, err)
	require.Equal(t, PartitionRequest{Partition: partA, Subpartition: 7, Receiver: recvA, InitialCredit: 2}, f.PartitionRequest)
	f, err = r.ReadFrame()
	require.NoError(t, err)
	require.Equal(t, Hello{Version: 1, Token: []byte("tok")}, f.Hello)

	h := BufferResponseHeader{Receiver: recvA, Sequence: 1<<32 - 1, Backlog: 1<<31 - 1, Partials: []uint32{1, 2}, Size: 3}
	r = newReader(t, bytes.NewReader(AppendBufferResponse(nil, h, []byte("xyz"))), ClientBound)
	f, err = r.ReadFrame()
	require.NoError(t, err)
	require.Equal(t, h, f.BufferResponse)
	require.Equal(t, 2, f.BufferResponse.Buffers())
	require.NoError(t, r.DiscardPayload())
	_, err = r.ReadFrame()
	require.ErrorIs(t, err, io.EOF)
}

func TestBufferResponseHeaderLength(t *testing.T) {
	h := BufferResponseHeader{Receiver: recvA, Size: 1000}
	b := AppendBufferResponseHeader(make([]byte, 0, 64), h)
	require.Len(t, b, HeaderSize+bufferResponseFixed+4)
	require.Equal(t, uint32(5+bufferResponseFixed+4+1000), binary.BigEndian.Uint32(b))
}

func TestAppendDoesNotAllocate(t *testing.T) {
	dst := make([]byte, 0, 256)
	h := BufferResponseHeader{Receiver: recvA, Sequence: 1, Backlog: 2, Partials: []uint32{3, 4}, Size: 7}
	allocs := testing.AllocsPerRun(100, func() {
		b := AppendBufferResponseHeader(dst[:0], h)
		b = AppendAddCredit(b, AddCredit{Receiver: recvA, Credit: 1})
		b = AppendBacklogAnnouncement(b, BacklogAnnouncement{Receiver: recvA, Backlog: 1})
		_ = AppendHello(b, Hello{Version: 1, Token: []byte("t")})
	})
	require.Zero(t, allocs)
}

func TestErrorResponseMessageSanitized(t *testing.T) {
	long := strings.Repeat("é", 40000) // 80000 bytes
	b := AppendErrorResponse(nil, ErrorResponse{Message: long})
	r := newReader(t, bytes.NewReader(b), ClientBound)
	f, err := r.ReadFrame()
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("é", 32767), f.ErrorResponse.Message)
	require.True(t, f.ErrorResponse.Fatal())

	b = AppendErrorResponse(nil, ErrorResponse{Message: "a\xffb"})
	r = newReader(t, bytes.NewReader(b), ClientBound)
	f, err = r.ReadFrame()
	require.NoError(t, err)
	require.Equal(t, "a\uFFFDb", f.ErrorResponse.Message)
}

// frame builds a raw frame with the given length field, magic, type and
// body.
func frame(length uint32, magic uint32, typ byte, body ...byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, length)
	b = binary.BigEndian.AppendUint32(b, magic)
	b = append(b, typ)
	return append(b, body...)
}

// raw builds a well-formed header around body.
func raw(typ MessageType, body ...byte) []byte {
	return frame(uint32(5+len(body)), Magic, byte(typ), body...)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func u16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func TestFaults(t *testing.T) {
	rid := recvA[:]
	// bufResp builds a BUFFER_RESPONSE body.
	bufResp := func(dt, k byte, rest ...byte) []byte {
		return cat(rid, u32(0), u32(0), []byte{dt, 0, 0, k}, rest)
	}
	cases := []struct {
		name  string
		dir   Direction
		input []byte
		want  string // substring of the *ProtocolError; "" = truncated
	}{
		{"garbage-http", ServerBound, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), "exceeds maximum"},
		{"garbage-tls", ServerBound, []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03}, "exceeds maximum"},
		{"length-0", ServerBound, frame(0, Magic, 0x14), "below 5"},
		{"length-4", ServerBound, frame(4, Magic, 0x14), "below 5"},
		{"oversized", ClientBound, frame(DefaultMaxFrameSize+1, Magic, 0x20), "exceeds maximum"},
		{"oversized-huge", ClientBound, []byte{0xff, 0xff, 0xff, 0xff}, "exceeds maximum"},
		{"wrong-magic", ServerBound, frame(5, 0x57454953, 0x14), "magic"},
		{"unknown-type", ServerBound, frame(5, Magic, 0x03), "unknown type 0x03"},
		{"unknown-type-0", ClientBound, frame(5, Magic, 0x00), "unknown type 0x00"},
		{"unknown-type-16", ServerBound, frame(5, Magic, 0x16), "unknown type 0x16"},
		{"unknown-type-23", ClientBound, frame(5, Magic, 0x23), "unknown type 0x23"},
		{"server-reads-buffer", ServerBound, AppendBufferResponse(nil, BufferResponseHeader{Size: 1}, []byte{1}), "not defined client→server"},
		{"server-reads-hello-ack", ServerBound, AppendHelloAck(nil, HelloAck{Version: 1}), "not defined"},
		{"client-reads-hello", ClientBound, AppendHello(nil, Hello{Version: 1}), "not defined server→client"},
		{"client-reads-close", ClientBound, AppendClose(nil), "not defined"},
		{"close-with-body", ServerBound, raw(TypeClose, 0), "body of 1 bytes, want 0"},
		{"add-credit-short", ServerBound, raw(TypeAddCredit, cat(rid, []byte{0, 0, 1})...), "body of 19 bytes, want 20"},
		{"add-credit-long", ServerBound, raw(TypeAddCredit, cat(rid, u32(1), []byte{0})...), "body of 21 bytes, want 20"},
		{"partition-request-short", ServerBound, raw(TypePartitionRequest, cat(rid, rid)...), "want 40"},
		{"resume-long", ServerBound, raw(TypeResumeConsumption, cat(rid, rid)...), "want 16"},
		{"cancel-empty", ServerBound, raw(TypeCancelPartition), "want 16"},
		{"new-buffer-size-short", ServerBound, raw(TypeNewBufferSize, rid...), "want 20"},
		{"hello-ack-long", ClientBound, raw(TypeHelloAck, 0, 1, 0), "want 2"},
		{"backlog-short", ClientBound, raw(TypeBacklogAnnouncement, rid...), "want 20"},
		{"hello-short", ServerBound, raw(TypeHello, 0, 1, 0, 0), "at least 6"},
		{"hello-token-longer-than-body", ServerBound, raw(TypeHello, cat(u16(1), u16(0), u16(5), []byte("abc"))...), "token length 5, but 3 bytes follow"},
		{"hello-token-shorter-than-body", ServerBound, raw(TypeHello, cat(u16(1), u16(0), u16(1), []byte("abc"))...), "token length 1, but 3 bytes follow"},
		{"hello-flags", ServerBound, raw(TypeHello, cat(u16(1), u16(2), u16(0))...), "bits other than bit 0"},
		{"hello-flags-high", ServerBound, raw(TypeHello, cat(u16(1), u16(0x8001), u16(0))...), "bits other than bit 0"},
		{"error-short", ClientBound, raw(TypeErrorResponse, rid...), "at least 19"},
		{"error-message-longer", ClientBound, raw(TypeErrorResponse, cat(rid, []byte{2}, u16(4), []byte("ab"))...), "message length 4, but 2 bytes follow"},
		{"error-message-shorter", ClientBound, raw(TypeErrorResponse, cat(rid, []byte{2}, u16(1), []byte("ab"))...), "message length 1, but 2 bytes follow"},
		{"error-message-utf8", ClientBound, raw(TypeErrorResponse, cat(rid, []byte{2}, u16(1), []byte{0xff})...), "UTF-8"},
		{"buffer-short", ClientBound, raw(TypeBufferResponse, cat(rid, u32(0))...), "at least 32"},
		{"buffer-size-larger", ClientBound, raw(TypeBufferResponse, bufResp(0, 0, cat(u32(3), []byte("ab"))...)...), "size 3, but 2 payload bytes follow"},
		{"buffer-size-smaller", ClientBound, raw(TypeBufferResponse, bufResp(0, 0, cat(u32(1), []byte("ab"))...)...), "size 1, but 2 payload bytes follow"},
		{"buffer-partial-count-vs-length", ClientBound, raw(TypeBufferResponse, bufResp(0, 3, cat(u32(1), u32(1))...)...), "partial count 3 needs at least 44"},
		{"buffer-partial-sum", ClientBound, raw(TypeBufferResponse, bufResp(0, 2, cat(u32(1), u32(2), u32(4), []byte("abcd"))...)...), "partial sizes sum to 3, size is 4"},
		{"buffer-partial-sum-overflow", ClientBound, raw(TypeBufferResponse, bufResp(0, 2, cat(u32(1<<32-1), u32(3), u32(2), []byte("ab"))...)...), "sum to 4294967298"},
		{"buffer-partial-event", ClientBound, raw(TypeBufferResponse, bufResp(1, 1, cat(u32(1), u32(1), []byte("a"))...)...), "partial buffers of data type event"},
		{"buffer-data-type", ClientBound, raw(TypeBufferResponse, bufResp(5, 0, u32(0)...)...), "unknown data type 5"},
		{"buffer-negative-backlog", ClientBound, raw(TypeBufferResponse, cat(rid, u32(0), u32(1<<32-1), []byte{0, 0, 0, 0}, u32(0))...), "negative backlog -1"},
		// Truncation: the peer half-closes inside a frame.
		{"truncated-length", ServerBound, []byte{0, 0}, ""},
		{"truncated-magic", ServerBound, []byte{0, 0, 0, 5, 0x57}, ""},
		{"truncated-type", ServerBound, []byte{0, 0, 0, 5, 0x57, 0x45, 0x49, 0x52}, ""},
		{"truncated-body", ServerBound, AppendAddCredit(nil, AddCredit{Receiver: recvA, Credit: 1})[:20], ""},
		{"truncated-token", ServerBound, AppendHello(nil, Hello{Token: []byte("abcdef")})[:17], ""},
		{"truncated-partials", ClientBound, AppendBufferResponse(nil, BufferResponseHeader{Partials: []uint32{1, 1}, Size: 2}, []byte("ab"))[:40], ""},
		{"truncated-error-message", ClientBound, AppendErrorResponse(nil, ErrorResponse{Message: "hello"})[:30], ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Prefix a valid frame: errors arise mid-stream, not just first.
			var good []byte
			if c.dir == ServerBound {
				good = AppendAddCredit(nil, AddCredit{Receiver: recvA, Credit: 1})
			} else {
				good = AppendBacklogAnnouncement(nil, BacklogAnnouncement{Receiver: recvA, Backlog: 1})
			}
			for _, src := range []io.Reader{
				bytes.NewReader(cat(good, c.input)),
				iotest.OneByteReader(bytes.NewReader(cat(good, c.input))),
			} {
				r := newReader(t, src, c.dir)
				_, err := r.ReadFrame()
				require.NoError(t, err)
				out, err := readAll(r)
				require.Empty(t, out)
				require.Error(t, err)
				if c.want == "" {
					require.ErrorIs(t, err, io.ErrUnexpectedEOF)
					require.NotErrorIs(t, err, io.EOF)
				} else {
					var pe *ProtocolError
					require.ErrorAs(t, err, &pe, "%v", err)
					require.Contains(t, pe.Error(), c.want)
				}
				// Sticky.
				_, err2 := r.ReadFrame()
				require.Equal(t, err, err2)
			}
		})
	}
}

// countingReader records how many bytes were read from it, to show that an
// oversized frame is rejected before its body is read.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestLengthCheckedFirst(t *testing.T) {
	r, err := NewReader(iotest.OneByteReader(bytes.NewReader(frame(1<<20, Magic, 0x20))), ClientBound, ReaderConfig{MaxFrameSize: 1 << 16, BufferSize: 16})
	require.NoError(t, err)
	_, err = r.ReadFrame()
	var pe *ProtocolError
	require.ErrorAs(t, err, &pe)
	require.Contains(t, err.Error(), "frame length 1048576 exceeds maximum 65536")

	// A max-size frame is accepted, one more byte is not.
	max := 1 << 10
	body := make([]byte, max-5-bufferResponseFixed-4)
	ok := AppendBufferResponse(nil, BufferResponseHeader{Size: uint32(len(body))}, body)
	tooBig := AppendBufferResponse(nil, BufferResponseHeader{Size: uint32(len(body) + 1)}, append(body, 0))
	cr := &countingReader{r: bytes.NewReader(cat(ok, tooBig))}
	r, err = NewReader(cr, ClientBound, ReaderConfig{MaxFrameSize: max, BufferSize: 16})
	require.NoError(t, err)
	_, err = r.ReadFrame()
	require.NoError(t, err)
	_, err = r.ReadFrame() // discards the payload
	require.ErrorAs(t, err, &pe)
	require.Less(t, cr.n, len(ok)+4+16+1)
}

func TestCleanEOF(t *testing.T) {
	r := newReader(t, bytes.NewReader(nil), ServerBound)
	_, err := r.ReadFrame()
	require.Equal(t, io.EOF, err)

	r = newReader(t, iotest.DataErrReader(bytes.NewReader(AppendClose(nil))), ServerBound)
	f, err := r.ReadFrame()
	require.NoError(t, err)
	require.Equal(t, TypeClose, f.Type)
	_, err = r.ReadFrame()
	require.Equal(t, io.EOF, err)
}

func TestReadError(t *testing.T) {
	boom := errors.New("boom")
	r := newReader(t, io.MultiReader(bytes.NewReader([]byte{0, 0, 0, 5}), iotest.ErrReader(boom)), ServerBound)
	_, err := r.ReadFrame()
	require.ErrorIs(t, err, boom)
	require.NotErrorIs(t, err, io.ErrUnexpectedEOF)
}

func TestPayloadRefusedAndTruncated(t *testing.T) {
	b := AppendBufferResponse(nil, BufferResponseHeader{Receiver: recvA, Size: 10}, make([]byte, 10))
	r := newReader(t, bytes.NewReader(b), ClientBound)
	_, err := r.ReadFrame()
	require.NoError(t, err)
	err = r.ReadPayload(make([]byte, 9))
	var pe *ProtocolError
	require.ErrorAs(t, err, &pe)
	require.Contains(t, err.Error(), "payload of 10 bytes exceeds the 9-byte buffer")
	_, err2 := r.ReadFrame()
	require.Equal(t, err, err2)

	r = newReader(t, bytes.NewReader(b[:len(b)-1]), ClientBound)
	_, err = r.ReadFrame()
	require.NoError(t, err)
	require.ErrorIs(t, r.ReadPayload(make([]byte, 10)), io.ErrUnexpectedEOF)

	r = newReader(t, bytes.NewReader(b[:len(b)-1]), ClientBound)
	_, err = r.ReadFrame()
	require.NoError(t, err)
	require.ErrorIs(t, r.DiscardPayload(), io.ErrUnexpectedEOF)

	r = newReader(t, bytes.NewReader(AppendClose(nil)), ServerBound)
	_, err = r.ReadFrame()
	require.NoError(t, err)
	require.Error(t, r.ReadPayload(nil))
	require.Error(t, r.DiscardPayload())
}

func TestUnreadPayloadDiscarded(t *testing.T) {
	b := AppendBufferResponse(nil, BufferResponseHeader{Size: 3}, []byte("abc"))
	b = AppendBacklogAnnouncement(b, BacklogAnnouncement{Receiver: recvA, Backlog: 2})
	r := newReader(t, bytes.NewReader(b), ClientBound)
	_, err := r.ReadFrame()
	require.NoError(t, err)
	f, err := r.ReadFrame()
	require.NoError(t, err)
	require.Equal(t, TypeBacklogAnnouncement, f.Type)
}

func TestReaderConfig(t *testing.T) {
	for _, cfg := range []ReaderConfig{{MaxFrameSize: 44}, {MaxFrameSize: -1}, {BufferSize: -1}, {MaxFrameSize: 1 << 33}} {
		_, err := NewReader(bytes.NewReader(nil), ServerBound, cfg)
		require.Error(t, err, "%+v", cfg)
	}
	_, err := NewReader(bytes.NewReader(nil), 0, ReaderConfig{})
	require.Error(t, err)
	_, err = NewReader(bytes.NewReader(nil), ClientBound, ReaderConfig{MaxFrameSize: 45, BufferSize: 1})
	require.NoError(t, err)
}

// chunkReader returns one chunk per Read.
type chunkReader struct{ chunks [][]byte }

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.chunks) > 0 && len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	return n, nil
}

func TestSplitAtEveryByte(t *testing.T) {
	for _, dir := range []Direction{ServerBound, ClientBound} {
		var stream []byte
		for _, s := range samples() {
			if s.dir == dir {
				stream = append(stream, s.frame...)
			}
		}
		want, err := readAll(newReader(t, bytes.NewReader(stream), dir))
		require.Equal(t, io.EOF, err)
		require.Equal(t, stream, bytes.Join(want, nil))
		for i := 0; i <= len(stream); i++ {
			for j := i; j <= len(stream); j += 7 {
				src := &chunkReader{chunks: [][]byte{stream[:i:i], stream[i:j:j], stream[j:]}}
				r, err := NewReader(src, dir, ReaderConfig{BufferSize: 16})
				require.NoError(t, err)
				got, err := readAll(r)
				require.Equal(t, io.EOF, err, "split %d/%d", i, j)
				require.Equal(t, want, got, "split %d/%d", i, j)
			}
			// Cut off at i: clean EOF only on a frame boundary.
			got, err := readAll(newReader(t, iotest.OneByteReader(bytes.NewReader(stream[:i])), dir))
			if bytes.Equal(bytes.Join(got, nil), stream[:i]) {
				require.Equal(t, io.EOF, err, "cut %d", i)
			} else {
				require.ErrorIs(t, err, io.ErrUnexpectedEOF, "cut %d", i)
			}
		}
	}
}

func TestReaderSteadyStateAllocs(t *testing.T) {
	var stream []byte
	stream = AppendBufferResponse(stream, BufferResponseHeader{Receiver: recvA, Backlog: 3, Size: 64}, make([]byte, 64))
	stream = AppendBufferResponse(stream, BufferResponseHeader{Receiver: recvA, Partials: []uint32{32, 32}, Size: 64}, make([]byte, 64))
	stream = AppendBacklogAnnouncement(stream, BacklogAnnouncement{Receiver: recvA, Backlog: 1})
	stream = AppendHelloAck(stream, HelloAck{Version: 1})
	src := &loopReader{data: stream}
	r := newReader(t, src, ClientBound)
	seg := make([]byte, 128)
	step := func() {
		for range 4 {
			f, err := r.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if f.Type == TypeBufferResponse {
				if err := r.ReadPayload(seg); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	step() // warm up scratch
	require.Zero(t, testing.AllocsPerRun(1000, step))

	ss := AppendAddCredit(nil, AddCredit{Receiver: recvA, Credit: 1})
	ss = AppendHello(ss, Hello{Version: 1, Token: []byte("token")})
	ss = AppendPartitionRequest(ss, PartitionRequest{})
	rs := newReader(t, &loopReader{data: ss}, ServerBound)
	step = func() {
		for range 3 {
			if _, err := rs.ReadFrame(); err != nil {
				t.Fatal(err)
			}
		}
	}
	step()
	require.Zero(t, testing.AllocsPerRun(1000, step))
}

// loopReader replays data forever.
type loopReader struct {
	data []byte
	off  int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], l.data[l.off:])
		n += c
		l.off = (l.off + c) % len(l.data)
	}
	return n, nil
}

func BenchmarkBufferResponseHeader(b *testing.B) {
	h := BufferResponseHeader{Receiver: recvA, Sequence: 1, Backlog: 7, DataType: DataBuffer, Size: 32 << 10}
	payload := make([]byte, h.Size)
	frameBuf := AppendBufferResponse(nil, h, payload)
	r, err := NewReader(&loopReader{data: frameBuf}, ClientBound, ReaderConfig{})
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, 0, 64)
	b.ReportAllocs()
	b.SetBytes(int64(len(frameBuf)))
	for b.Loop() {
		h.Sequence++
		dst = AppendBufferResponseHeader(dst[:0], h)
		f, err := r.ReadFrame()
		if err != nil {
			b.Fatal(err)
		}
		if f.BufferResponse.Size != h.Size {
			b.Fatal("size")
		}
		if err := r.ReadPayload(payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBufferResponseHeaderOnly(b *testing.B) {
	h := BufferResponseHeader{Receiver: recvA, Sequence: 1, Backlog: 7, Size: 0}
	frameBuf := AppendBufferResponseHeader(nil, h)
	r, err := NewReader(&loopReader{data: frameBuf}, ClientBound, ReaderConfig{})
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		dst = AppendBufferResponseHeader(dst[:0], h)
		if _, err := r.ReadFrame(); err != nil {
			b.Fatal(err)
		}
		if err := r.DiscardPayload(); err != nil {
			b.Fatal(err)
		}
	}
}
