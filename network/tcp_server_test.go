package network

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/network/wire"
)

// testServer is a Server on a loopback port with its registry.
type testServer struct {
	srv   *Server
	parts *PartitionManager
	addr  string
	done  chan error
}

func startServer(t testing.TB, cfg ServerConfig) *testServer {
	t.Helper()
	pm := NewPartitionManager()
	srv, err := NewServer(cfg, pm, nil)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ts := &testServer{srv: srv, parts: pm, addr: ln.Addr().String(), done: make(chan error, 1)}
	go func() { ts.done <- srv.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		srv.Close()
		require.ErrorIs(t, <-ts.done, ErrServerClosed)
	})
	return ts
}

// rawClient speaks the protocol by hand, with wire, for deterministic
// tests of the server.
type rawClient struct {
	t  testing.TB
	nc net.Conn
	rd *wire.Reader
}

// rawFrame is a copy of a frame and its payload.
type rawFrame struct {
	wire.Frame
	Payload []byte
}

func dialRaw(t testing.TB, addr string) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	rd, err := wire.NewReader(nc, wire.ClientBound, wire.ReaderConfig{})
	require.NoError(t, err)
	return &rawClient{t: t, nc: nc, rd: rd}
}

func (c *rawClient) send(b []byte) {
	c.t.Helper()
	_, err := c.nc.Write(b)
	require.NoError(c.t, err)
}

// next reads the next frame; the deadline only keeps a broken test from
// hanging.
func (c *rawClient) next() (rawFrame, error) {
	c.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	f, err := c.rd.ReadFrame()
	if err != nil {
		return rawFrame{}, err
	}
	out := rawFrame{Frame: *f}
	if f.Type == wire.TypeBufferResponse {
		out.BufferResponse.Partials = append([]uint32(nil), f.BufferResponse.Partials...)
		out.Payload = make([]byte, f.BufferResponse.Size)
		if err := c.rd.ReadPayload(out.Payload); err != nil {
			return rawFrame{}, err
		}
	}
	return out, nil
}

func (c *rawClient) must() rawFrame {
	c.t.Helper()
	f, err := c.next()
	require.NoError(c.t, err)
	return f
}

func (c *rawClient) hello(token string) {
	c.t.Helper()
	c.send(wire.AppendHello(nil, wire.Hello{Version: wire.Version, Token: []byte(token)}))
	f := c.must()
	require.Equal(c.t, wire.TypeHelloAck, f.Type, "%+v", f.ErrorResponse)
	require.Equal(c.t, wire.Version, f.HelloAck.Version)
}

// expectFatal reads a fatal ERROR_RESPONSE of class and then the end of
// the connection.
func (c *rawClient) expectFatal(class wire.ErrorClass) {
	c.t.Helper()
	f := c.must()
	require.Equal(c.t, wire.TypeErrorResponse, f.Type)
	require.True(c.t, f.ErrorResponse.Fatal(), "receiver %s", f.ErrorResponse.Receiver)
	require.Equal(c.t, class, f.ErrorResponse.Class, f.ErrorResponse.Message)
	c.expectEOF()
}

func (c *rawClient) expectEOF() {
	c.t.Helper()
	_, err := c.next()
	require.Error(c.t, err)
	require.True(c.t, errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err), "%v", err)
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && !oe.Timeout()
}

func (c *rawClient) request(part uuid.UUID, sub uint32, recv uuid.UUID, credit uint32) {
	c.send(wire.AppendPartitionRequest(nil, wire.PartitionRequest{Partition: part, Subpartition: sub, Receiver: recv, InitialCredit: credit}))
}

func (c *rawClient) addCredit(recv uuid.UUID, n uint32) {
	c.send(wire.AppendAddCredit(nil, wire.AddCredit{Receiver: recv, Credit: n}))
}

// testPartition is a ResultPartition written by the test goroutine.
func newTestPartition(t testing.TB, subs int) (*buffer.GlobalPool, *ResultPartition) {
	t.Helper()
	g, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: 256, NumSegments: 256})
	require.NoError(t, err)
	pool, err := g.NewLocalPool(subs+1, 64)
	require.NoError(t, err)
	p, err := NewResultPartition(uuid.New(), "test", subs, pool)
	require.NoError(t, err)
	return g, p
}

// writeBuffer queues one data buffer holding the record v on sub.
func writeBuffer(t testing.TB, p *ResultPartition, sub int, v uint64) {
	t.Helper()
	var rec [8]byte
	binary.BigEndian.PutUint64(rec[:], v)
	require.NoError(t, p.Write(sub, rec[:]))
	p.FlushSub(sub)
}

func recordOf(t testing.TB, payload []byte) uint64 {
	t.Helper()
	require.Len(t, payload, 12)
	require.Equal(t, uint32(8), binary.BigEndian.Uint32(payload))
	return binary.BigEndian.Uint64(payload[4:])
}

func requireBuffer(t testing.TB, f rawFrame, recv uuid.UUID, seq uint32, typ wire.DataType, backlog int32) {
	t.Helper()
	require.Equal(t, wire.TypeBufferResponse, f.Type, "%+v", f.Frame)
	h := f.BufferResponse
	require.Equal(t, recv, h.Receiver)
	require.Equal(t, seq, h.Sequence, "sequence")
	require.Equal(t, typ, h.DataType, "data type")
	if backlog >= 0 {
		require.Equal(t, backlog, h.Backlog, "backlog")
	}
}

func requireAnnouncement(t testing.TB, f rawFrame, recv uuid.UUID, backlog uint32) {
	t.Helper()
	require.Equal(t, wire.TypeBacklogAnnouncement, f.Type, "%+v", f.Frame)
	require.Equal(t, recv, f.BacklogAnnouncement.Receiver)
	require.Equal(t, backlog, f.BacklogAnnouncement.Backlog)
}

// TestServerCreditAndBacklog drives the server's credit rules with a raw
// client. Subpartition 1 is a probe: its reader is queued behind
// subpartition 0's on every ADD_CREDIT, so its buffer arriving proves the
// server had nothing it could send for subpartition 0 (the writer serves
// its queue in order).
func TestServerCreditAndBacklog(t *testing.T) {
	g, p := newTestPartition(t, 2)
	ts := startServer(t, ServerConfig{})
	require.NoError(t, ts.parts.Register(p))
	c := dialRaw(t, ts.addr)
	c.hello("")

	for i := range 8 {
		writeBuffer(t, p, 1, uint64(100+i))
	}
	probeSeq := uint32(0)
	r0, r1 := uuid.New(), uuid.New()
	c.request(p.ID(), 1, r1, 0)
	requireAnnouncement(t, c.must(), r1, 8)
	probe := func() {
		t.Helper()
		c.addCredit(r1, 1)
		f := c.must()
		requireBuffer(t, f, r1, probeSeq, wire.DataBuffer, int32(7-probeSeq))
		require.Equal(t, uint64(100+probeSeq), recordOf(t, f.Payload))
		requireAnnouncement(t, c.must(), r1, 7-probeSeq)
		probeSeq++
	}

	// Credit 0: data buffers queued, so exactly one backlog announcement.
	writeBuffer(t, p, 0, 0)
	writeBuffer(t, p, 0, 1)
	writeBuffer(t, p, 0, 2)
	c.request(p.ID(), 0, r0, 0)
	requireAnnouncement(t, c.must(), r0, 3)
	writeBuffer(t, p, 0, 3) // more data while out of credit: no second announcement
	probe()

	// One credit, one buffer, then one announcement for the rest.
	c.addCredit(r0, 1)
	f := c.must()
	requireBuffer(t, f, r0, 0, wire.DataBuffer, 3)
	require.Equal(t, uint64(0), recordOf(t, f.Payload))
	requireAnnouncement(t, c.must(), r0, 3)
	probe()

	// Three credits drain it; no announcement at backlog 0.
	c.addCredit(r0, 3)
	for i := range 3 {
		f := c.must()
		requireBuffer(t, f, r0, uint32(1+i), wire.DataBuffer, int32(2-i))
		require.Equal(t, uint64(1+i), recordOf(t, f.Payload))
	}
	probe()

	// Events need no credit; an aligned barrier blocks until RESUME, even
	// with credit.
	c.addCredit(r0, 2)
	probe() // the credit arrived
	wm := wire.AppendEvent(nil, wire.Event{Kind: wire.EventWatermark, Watermark: 42})
	p.FlushSub(0)
	p.Subpartition(0).add(buffer.Wrap(wm, buffer.Event))
	p.Subpartition(0).add(buffer.Wrap(barrierPayload(1), buffer.AlignedBarrier))
	requireBuffer(t, c.must(), r0, 4, wire.DataEvent, 0)
	requireBuffer(t, c.must(), r0, 5, wire.DataAlignedBarrier, 0)
	writeBuffer(t, p, 0, 4)
	c.addCredit(r0, 1)
	probe() // nothing followed the barrier
	c.send(wire.AppendResumeConsumption(nil, wire.ResumeConsumption{Receiver: r0}))
	f = c.must()
	requireBuffer(t, f, r0, 6, wire.DataBuffer, 0)
	require.Equal(t, uint64(4), recordOf(t, f.Payload))

	// End of partition is the last frame; frames for the released receiver
	// are ignored afterwards.
	p.Finish(eop)
	f = c.must()
	requireBuffer(t, f, r0, 7, wire.DataEvent, 0)
	require.Equal(t, eop, f.Payload)
	c.addCredit(r0, 1)
	c.send(wire.AppendCancelPartition(nil, wire.CancelPartition{Receiver: r0}))
	c.send(wire.AppendClose(nil))
	// Sub 1 still held data and events; CLOSE released it.
	c.expectEOF()
	p.ReleaseProducer()
	waitFor(t, func() bool { return g.InUse() == 0 })
}

func barrierPayload(id uint64) []byte {
	return wire.AppendEvent(nil, wire.Event{Kind: wire.EventBarrier, Barrier: barrier.Barrier{ID: barrier.CheckpointID(id), Timestamp: 1}})
}

// waitFor polls cond; for state that settles asynchronously (buffers
// recycled by another goroutine), never as a timing assertion.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 20*time.Second, time.Millisecond)
}

// TestServerBadInput sends every kind of bad input on one connection and
// checks the answer docs/protocol.md specifies, and that the server still
// serves another connection.
func TestServerBadInput(t *testing.T) {
	var p *ResultPartition // a fresh one per case
	ts := startServer(t, ServerConfig{Token: []byte("secret"), HelloTimeout: 50 * time.Millisecond, MaxFrameSize: 1024})
	hello := func(c *rawClient) { c.hello("secret") }
	frame := func(length uint32, magic uint32, typ byte, body []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, length)
		b = binary.BigEndian.AppendUint32(b, magic)
		return append(append(b, typ), body...)
	}
	recv := uuid.New()
	cases := []struct {
		name  string
		run   func(c *rawClient)
		class wire.ErrorClass // 0: plain close without ERROR_RESPONSE
	}{
		{"garbage", func(c *rawClient) { c.send([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) }, wire.ClassProtocol},
		{"garbage after hello", func(c *rawClient) { hello(c); c.send([]byte("\x00\x00\x00\x09garbage!!")) }, wire.ClassProtocol},
		{"wrong magic", func(c *rawClient) { c.send(frame(11, 0x57454953, 1, []byte{0, 1, 0, 0, 0, 0})) }, wire.ClassProtocol},
		{"length below 5", func(c *rawClient) { c.send(frame(4, wire.Magic, 1, nil)) }, wire.ClassProtocol},
		{"oversized frame", func(c *rawClient) { hello(c); c.send(frame(1025, wire.Magic, 0x10, nil)) }, wire.ClassProtocol},
		{"unknown type", func(c *rawClient) { hello(c); c.send(frame(5, wire.Magic, 0x7f, nil)) }, wire.ClassProtocol},
		{"client-bound type", func(c *rawClient) { hello(c); c.send(wire.AppendHelloAck(nil, wire.HelloAck{Version: 1})) }, wire.ClassProtocol},
		{"body too short", func(c *rawClient) { hello(c); c.send(frame(5+19, wire.Magic, 0x11, make([]byte, 19))) }, wire.ClassProtocol},
		{"truncated frame", func(c *rawClient) {
			hello(c)
			c.send(wire.AppendAddCredit(nil, wire.AddCredit{Receiver: recv, Credit: 1})[:15])
			c.nc.(*net.TCPConn).CloseWrite()
		}, 0},
		{"no hello", func(c *rawClient) {}, wire.ClassProtocol},
		{"request before hello", func(c *rawClient) { c.request(p.ID(), 0, recv, 1) }, wire.ClassProtocol},
		{"second hello", func(c *rawClient) {
			hello(c)
			c.send(wire.AppendHello(nil, wire.Hello{Version: 1, Token: []byte("secret")}))
		}, wire.ClassProtocol},
		{"wrong token", func(c *rawClient) { c.send(wire.AppendHello(nil, wire.Hello{Version: 1, Token: []byte("guess")})) }, wire.ClassUnauthenticated},
		{"no token", func(c *rawClient) { c.send(wire.AppendHello(nil, wire.Hello{Version: 1})) }, wire.ClassUnauthenticated},
		{"wrong version", func(c *rawClient) { c.send(wire.AppendHello(nil, wire.Hello{Version: 2, Token: []byte("secret")})) }, wire.ClassProtocol},
		{"hello flags", func(c *rawClient) {
			c.send(frame(5+6, wire.Magic, 1, []byte{0, 1, 0, 2, 0, 0}))
		}, wire.ClassProtocol},
		{"add credit unknown receiver", func(c *rawClient) { hello(c); c.addCredit(uuid.New(), 1) }, wire.ClassProtocol},
		{"resume unknown receiver", func(c *rawClient) {
			hello(c)
			c.send(wire.AppendResumeConsumption(nil, wire.ResumeConsumption{Receiver: uuid.New()}))
		}, wire.ClassProtocol},
		{"cancel unknown receiver", func(c *rawClient) {
			hello(c)
			c.send(wire.AppendCancelPartition(nil, wire.CancelPartition{Receiver: uuid.New()}))
		}, wire.ClassProtocol},
		{"buffer size unknown receiver", func(c *rawClient) {
			hello(c)
			c.send(wire.AppendNewBufferSize(nil, wire.NewBufferSize{Receiver: uuid.New(), Size: 1024}))
		}, wire.ClassProtocol},
		{"add credit zero", func(c *rawClient) { hello(c); c.request(p.ID(), 0, recv, 1); c.addCredit(recv, 0) }, wire.ClassProtocol},
		{"credit overflow", func(c *rawClient) { hello(c); c.request(p.ID(), 0, recv, 1<<31-1); c.addCredit(recv, 1) }, wire.ClassProtocol},
		{"initial credit overflow", func(c *rawClient) { hello(c); c.request(p.ID(), 0, recv, 1<<31) }, wire.ClassProtocol},
		{"duplicate request", func(c *rawClient) { hello(c); c.request(p.ID(), 0, recv, 1); c.request(p.ID(), 0, recv, 1) }, wire.ClassProtocol},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, p = newTestPartition(t, 1)
			defer p.Release()
			require.NoError(t, ts.parts.Register(p))
			c := dialRaw(t, ts.addr)
			tc.run(c)
			if tc.class == 0 {
				c.expectEOF()
			} else {
				c.expectFatal(tc.class)
			}
			// The server still serves another connection.
			ok := dialRaw(t, ts.addr)
			ok.hello("secret")
			ok.send(wire.AppendClose(nil))
			ok.expectEOF()
		})
	}
}

// TestServerNotFound: an unknown partition or subpartition gets a
// per-receiver "partition not found" and the connection lives on; frames
// for that receiver are ignored.
func TestServerNotFound(t *testing.T) {
	_, p := newTestPartition(t, 1)
	defer p.Release()
	ts := startServer(t, ServerConfig{})
	c := dialRaw(t, ts.addr)
	c.hello("")
	r := uuid.New()
	c.request(p.ID(), 0, r, 2)
	f := c.must()
	require.Equal(t, wire.TypeErrorResponse, f.Type)
	require.Equal(t, r, f.ErrorResponse.Receiver)
	require.Equal(t, wire.ClassPartitionNotFound, f.ErrorResponse.Class)

	require.NoError(t, ts.parts.Register(p))
	c.request(p.ID(), 5, r, 2)
	f = c.must()
	require.Equal(t, wire.ClassPartitionNotFound, f.ErrorResponse.Class)
	require.Contains(t, f.ErrorResponse.Message, "subpartition 5")

	// The retry with the same receiver succeeds.
	c.request(p.ID(), 0, r, 2)
	writeBuffer(t, p, 0, 7)
	f = c.must()
	requireBuffer(t, f, r, 0, wire.DataBuffer, 0)
	require.Equal(t, uint64(7), recordOf(t, f.Payload))
}

// TestServerFailPartition: a failed producer sends class 4 to each of its
// readers; another partition on the same connection keeps streaming.
func TestServerFailPartition(t *testing.T) {
	_, p := newTestPartition(t, 2)
	_, q := newTestPartition(t, 1)
	ts := startServer(t, ServerConfig{})
	require.NoError(t, ts.parts.Register(p))
	require.NoError(t, ts.parts.Register(q))
	c := dialRaw(t, ts.addr)
	c.hello("")
	ra, rb, rq := uuid.New(), uuid.New(), uuid.New()
	c.request(p.ID(), 0, ra, 1)
	c.request(p.ID(), 1, rb, 1)
	writeBuffer(t, p, 0, 1)
	requireBuffer(t, c.must(), ra, 0, wire.DataBuffer, 0)

	require.NoError(t, ts.parts.Fail(p.ID(), errors.New("task exploded")))
	got := map[uuid.UUID]bool{}
	for range 2 {
		f := c.must()
		require.Equal(t, wire.TypeErrorResponse, f.Type)
		require.Equal(t, wire.ClassProducerFailed, f.ErrorResponse.Class)
		require.Contains(t, f.ErrorResponse.Message, "task exploded")
		got[f.ErrorResponse.Receiver] = true
	}
	require.Equal(t, map[uuid.UUID]bool{ra: true, rb: true}, got)
	c.addCredit(ra, 1) // released: ignored

	c.request(q.ID(), 0, rq, 1)
	writeBuffer(t, q, 0, 9)
	f := c.must()
	requireBuffer(t, f, rq, 0, wire.DataBuffer, 0)
	require.Equal(t, uint64(9), recordOf(t, f.Payload))
	p.Release()
	q.Release()
}

// TestServerUnreadSubpartition: with one pool per subpartition, a
// subpartition nobody reads does not hold back another, read by a plain
// protocol client to its end.
func TestServerUnreadSubpartition(t *testing.T) {
	ts := startServer(t, ServerConfig{})
	const k, n = 2, 20000
	pr := startProducer(t, ts.parts, k, n, 8)
	c := dialRaw(t, ts.addr)
	c.hello("")
	r := uuid.New()
	c.request(pr.id, 1, r, 1000)
	next, seq := uint64(1), uint32(0)
	var carry []byte
	for {
		f := c.must()
		if f.Type == wire.TypeBacklogAnnouncement {
			continue
		}
		require.Equal(t, wire.TypeBufferResponse, f.Type)
		require.Equal(t, seq, f.BufferResponse.Sequence)
		seq++
		if f.BufferResponse.DataType != wire.DataBuffer {
			require.Equal(t, eop, f.Payload)
			break
		}
		c.addCredit(r, 1)
		carry = append(carry, f.Payload...)
		for len(carry) >= 12 {
			require.Equal(t, next, recordOf(t, carry[:12]))
			next += k
			carry = carry[12:]
		}
	}
	require.Empty(t, carry)
	require.Equal(t, uint64(n+1), next)
	waitFor(t, func() bool {
		ended, abandoned, err := ts.parts.Progress(pr.id)
		return err == nil && ended == 1 && abandoned == 0
	})
	c.send(wire.AppendClose(nil))
	c.expectEOF()
}
