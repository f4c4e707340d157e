package network

import (
	"bufio"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/network/credit"
	"github.com/weirstream/weir/network/wire"
)

// Server defaults.
const (
	// DefaultHelloTimeout is how long a server waits for a client's HELLO.
	DefaultHelloTimeout = 10 * time.Second
	// DefaultWriteBufferSize is the size of a connection's bufio.Writer.
	DefaultWriteBufferSize = 128 << 10
	// DefaultLingerTimeout bounds how long a server keeps a connection it
	// rejected open to let the ERROR_RESPONSE reach the peer.
	DefaultLingerTimeout = 2 * time.Second
)

// The pause after a temporary accept error: doubled after each one in a
// row, from minAcceptPause up to maxAcceptPause (net/http's values).
const (
	minAcceptPause = 5 * time.Millisecond
	maxAcceptPause = time.Second
)

// ErrServerClosed is returned by Server.Serve after Close.
var ErrServerClosed = errors.New("network: server closed")

// ServerConfig configures a Server. The zero value means the defaults.
type ServerConfig struct {
	// Token, if not empty, must equal the token of every client's HELLO
	// (compared in constant time); a client whose token differs gets
	// ERROR_RESPONSE class "unauthenticated" and is disconnected.
	Token []byte
	// TLS, if not nil, wraps every accepted connection (set ClientAuth and
	// ClientCAs for mutual TLS).
	TLS *tls.Config
	// HelloTimeout is how long a client may take to send HELLO (default
	// 10 s).
	HelloTimeout time.Duration
	// MaxFrameSize is the largest frame length accepted (default
	// wire.DefaultMaxFrameSize).
	MaxFrameSize int
	// ReadBufferSize and WriteBufferSize size the per-connection buffered
	// reader and writer (defaults wire.DefaultReadBufferSize,
	// DefaultWriteBufferSize).
	ReadBufferSize  int
	WriteBufferSize int
	// LingerTimeout bounds the time a rejected connection is kept to
	// deliver its ERROR_RESPONSE (default 2 s).
	LingerTimeout time.Duration
}

// WithDefaults returns c with zero values replaced by the defaults.
func (c ServerConfig) WithDefaults() ServerConfig {
	if c.HelloTimeout == 0 {
		c.HelloTimeout = DefaultHelloTimeout
	}
	if c.MaxFrameSize == 0 {
		c.MaxFrameSize = wire.DefaultMaxFrameSize
	}
	if c.ReadBufferSize == 0 {
		c.ReadBufferSize = wire.DefaultReadBufferSize
	}
	if c.WriteBufferSize == 0 {
		c.WriteBufferSize = DefaultWriteBufferSize
	}
	if c.LingerTimeout == 0 {
		c.LingerTimeout = DefaultLingerTimeout
	}
	return c
}

// Validate reports a value out of range.
func (c ServerConfig) Validate() error {
	c = c.WithDefaults()
	if c.HelloTimeout < 0 {
		return fmt.Errorf("network: server: negative HelloTimeout %v", c.HelloTimeout)
	}
	if c.LingerTimeout < 0 {
		return fmt.Errorf("network: server: negative LingerTimeout %v", c.LingerTimeout)
	}
	if c.WriteBufferSize < 64 {
		return fmt.Errorf("network: server: WriteBufferSize %d below 64", c.WriteBufferSize)
	}
	if len(c.Token) > 1<<16-1 {
		return fmt.Errorf("network: server: token of %d bytes exceeds 65535", len(c.Token))
	}
	if err := (wire.ReaderConfig{MaxFrameSize: c.MaxFrameSize, BufferSize: c.ReadBufferSize}).Validate(); err != nil {
		return fmt.Errorf("network: server: %w", err)
	}
	return nil
}

// Server serves the subpartitions registered in a PartitionManager to any
// number of TCP connections (docs/protocol.md, the server side). Each
// connection has one goroutine reading client frames and one writing:
// Flink's PartitionRequestQueue, a queue of readers with data that the
// writer serves round robin, sending data only against credit.
//
// Usage: NewServer, then Serve (blocks until the listener fails, ctx is
// done or Close), then Close.
type Server struct {
	cfg   ServerConfig
	parts *PartitionManager
	log   *zap.Logger

	mu struct {
		sync.Mutex
		ln     net.Listener
		conns  map[*serverConn]struct{}
		closed bool
	}
	wg   sync.WaitGroup // connection goroutines
	done chan struct{}  // closed by Close
	once sync.Once
}

// NewServer returns a server of the partitions in parts. log may be nil.
// It starts nothing.
func NewServer(cfg ServerConfig, parts *PartitionManager, log *zap.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if parts == nil {
		return nil, errors.New("network: server: nil PartitionManager")
	}
	if log == nil {
		log = zap.NewNop()
	}
	s := &Server{cfg: cfg.WithDefaults(), parts: parts, log: log, done: make(chan struct{})}
	s.mu.conns = make(map[*serverConn]struct{})
	return s, nil
}

// Partitions is the server's registry.
func (s *Server) Partitions() *PartitionManager { return s.parts }

// Serve accepts connections on ln until ln fails, ctx is done or Close is
// called, and serves each. A temporary accept error (net.Error's
// Temporary: a full file table, a connection aborted before it was
// accepted) is retried after a pause of 5 ms, doubling with each further
// one up to 1 s. It returns ErrServerClosed after Close or ctx's end,
// otherwise the listener's fatal error. Serve closes ln. Connections live
// on after Serve returns, until they end or Close.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.mu.ln = ln
	s.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	var pause time.Duration // after a temporary accept error
	for {
		nc, err := ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return ErrServerClosed
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Temporary() {
				// EMFILE, ENFILE, ECONNABORTED…: retry after a pause,
				// as net/http's Server.Serve does (5 ms doubling to 1 s).
				pause = min(max(2*pause, minAcceptPause), maxAcceptPause)
				s.log.Warn("accept failed; retrying", zap.Error(err), zap.Duration("pause", pause))
				t := time.NewTimer(pause)
				select {
				case <-t.C:
					continue
				case <-s.done:
					t.Stop()
					return ErrServerClosed
				}
			}
			ln.Close()
			return fmt.Errorf("network: server: accept: %w", err)
		}
		pause = 0
		if s.cfg.TLS != nil {
			nc = tls.Server(nc, s.cfg.TLS)
		}
		c := s.newConn(nc)
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			nc.Close()
			continue
		}
		s.mu.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			c.run()
			s.mu.Lock()
			delete(s.mu.conns, c)
			s.mu.Unlock()
		}()
	}
}

// NumConnections returns the number of open connections.
func (s *Server) NumConnections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.conns)
}

// Close stops accepting, closes every connection (releasing its readers)
// and waits for their goroutines. It is idempotent.
func (s *Server) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		s.mu.closed = true
		close(s.done)
		ln := s.mu.ln
		conns := make([]*serverConn, 0, len(s.mu.conns))
		for c := range s.mu.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		if ln != nil {
			ln.Close()
		}
		for _, c := range conns {
			c.nc.Close()
		}
	})
	s.wg.Wait()
	return nil
}

// serverConn is one client connection. Lock order: serverConn.mu, then a
// Subpartition's lock (Peek, Poll); the manager's lock is never taken
// with serverConn.mu held.
type serverConn struct {
	srv  *Server
	nc   net.Conn
	log  *zap.Logger
	wake chan struct{} // capacity 1: the writer has work

	mu struct {
		sync.Mutex
		active   map[uuid.UUID]*serverReader
		released map[uuid.UUID]struct{} // requested receivers no longer active
		queue    []*serverReader        // readers that may have something to send
		head     int
		ctrl     []byte // encoded control frames to send before any buffer
		fatal    bool   // a fatal ERROR_RESPONSE is queued: write it and close
		closing  bool   // no more frames; the writer stops
	}
	parts map[*servedPartition]struct{} // partitions read (reader goroutine only)
}

// serverReader serves one requested subpartition to one receiver (Flink's
// CreditBasedSequenceNumberingViewReader). Its fields are guarded by its
// connection's mu.
type serverReader struct {
	conn     *serverConn
	receiver uuid.UUID
	part     *servedPartition
	sub      *Subpartition
	subIndex int
	sender   *credit.Sender
	queued   bool
	released bool
}

// NotifyDataAvailable implements Listener: the subpartition has buffers
// again. Called by the producer.
func (r *serverReader) NotifyDataAvailable() {
	c := r.conn
	c.mu.Lock()
	ok := c.enqueueLocked(r)
	c.mu.Unlock()
	if ok {
		c.signal()
	}
}

// NotifyPriority implements Listener: a priority event waits at the head
// of the subpartition; the reader goes to the front of the writer's queue.
func (r *serverReader) NotifyPriority() {
	c := r.conn
	c.mu.Lock()
	ok := c.enqueueFrontLocked(r)
	c.mu.Unlock()
	if ok {
		c.signal()
	}
}

func (s *Server) newConn(nc net.Conn) *serverConn {
	c := &serverConn{srv: s, nc: nc, log: s.log.With(zap.String("remote", nc.RemoteAddr().String())),
		wake: make(chan struct{}, 1), parts: make(map[*servedPartition]struct{})}
	c.mu.active = make(map[uuid.UUID]*serverReader)
	c.mu.released = make(map[uuid.UUID]struct{})
	return c
}

func (c *serverConn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *serverConn) enqueueLocked(r *serverReader) bool {
	if r.queued || r.released || c.mu.closing {
		return false
	}
	r.queued = true
	if c.mu.head > 0 && c.mu.head == len(c.mu.queue) {
		c.mu.queue, c.mu.head = c.mu.queue[:0], 0
	}
	c.mu.queue = append(c.mu.queue, r)
	return true
}

// enqueueFrontLocked queues r ahead of the other readers (moving it if it
// is queued already).
func (c *serverConn) enqueueFrontLocked(r *serverReader) bool {
	if r.released || c.mu.closing {
		return false
	}
	if r.queued {
		for k := c.mu.head; k < len(c.mu.queue); k++ {
			if c.mu.queue[k] == r {
				copy(c.mu.queue[c.mu.head+1:k+1], c.mu.queue[c.mu.head:k])
				c.mu.queue[c.mu.head] = r
				return true
			}
		}
	}
	r.queued = true
	if c.mu.head > 0 {
		c.mu.head--
		c.mu.queue[c.mu.head] = r
		return true
	}
	c.mu.queue = append(c.mu.queue, nil)
	copy(c.mu.queue[1:], c.mu.queue)
	c.mu.queue[0] = r
	return true
}

// run serves the connection until it ends.
func (c *serverConn) run() {
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	err := c.readLoop()
	var pe *wire.ProtocolError
	var he *helloError
	switch {
	case errors.As(err, &pe), errors.As(err, &he):
		c.log.Info("closing connection", zap.Error(err))
		class := wire.ClassProtocol
		if he != nil {
			class = he.class
		}
		c.fail(class, err.Error())
		// Let the writer deliver the fatal ERROR_RESPONSE, half-close, then
		// drain what the peer still sends so our close does not reset the
		// connection before the peer read the error.
		c.nc.SetWriteDeadline(time.Now().Add(c.srv.cfg.LingerTimeout))
		<-writerDone
		c.nc.SetReadDeadline(time.Now().Add(c.srv.cfg.LingerTimeout))
		io.Copy(io.Discard, c.nc)
	case err == nil: // CLOSE
		c.fail(0, "")
		c.nc.SetWriteDeadline(time.Now().Add(c.srv.cfg.LingerTimeout))
		<-writerDone
	default:
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			c.log.Debug("connection lost", zap.Error(err))
		}
		c.fail(0, "")
		c.nc.Close() // unblocks a writer stuck on a dead peer
		<-writerDone
	}
	c.nc.Close()
	parts := make([]*servedPartition, 0, len(c.parts))
	for sp := range c.parts {
		parts = append(parts, sp)
	}
	c.srv.parts.connClosed(c, parts)
}

// helloError is a session error before HELLO_ACK, with its class.
type helloError struct {
	class wire.ErrorClass
	msg   string
}

func (e *helloError) Error() string { return "network: server: " + e.msg }

// fail stops the connection: every reader is released and, if class is
// non-zero, a fatal ERROR_RESPONSE of that class is queued for the writer,
// which then half-closes. With class 0 the writer just stops.
func (c *serverConn) fail(class wire.ErrorClass, msg string) {
	c.mu.Lock()
	if c.mu.closing {
		c.mu.Unlock()
		return
	}
	c.mu.closing = true
	if class != 0 {
		c.mu.fatal = true
		c.mu.ctrl = wire.AppendErrorResponse(c.mu.ctrl, wire.ErrorResponse{Class: class, Message: msg})
	}
	readers := make([]*serverReader, 0, len(c.mu.active))
	for _, r := range c.mu.active {
		r.released = true
		readers = append(readers, r)
	}
	clear(c.mu.active)
	c.mu.queue, c.mu.head = nil, 0
	c.mu.Unlock()
	c.signal()
	for _, r := range readers {
		r.sub.Release()
		c.srv.parts.removeReader(r, readerAbandoned)
	}
}

// failReader sends ERROR_RESPONSE (class producer failed) to r and
// releases it.
func (c *serverConn) failReader(r *serverReader, err error) {
	c.mu.Lock()
	if r.released || c.mu.closing {
		c.mu.Unlock()
		return
	}
	c.releaseLocked(r)
	c.mu.ctrl = wire.AppendErrorResponse(c.mu.ctrl, wire.ErrorResponse{Receiver: r.receiver,
		Class: wire.ClassProducerFailed, Message: err.Error()})
	c.mu.Unlock()
	c.signal()
	r.sub.Release()
	c.srv.parts.removeReader(r, readerAbandoned)
}

func (c *serverConn) releaseLocked(r *serverReader) {
	r.released = true
	delete(c.mu.active, r.receiver)
	c.mu.released[r.receiver] = struct{}{}
}

// release releases r (end of partition sent, or cancelled) if it is still
// active.
func (c *serverConn) release(r *serverReader, ended bool) {
	c.mu.Lock()
	if r.released {
		c.mu.Unlock()
		return
	}
	c.releaseLocked(r)
	c.mu.Unlock()
	r.sub.Release()
	how := readerAbandoned
	if ended {
		how = readerEnded
	}
	c.srv.parts.removeReader(r, how)
}

// readLoop reads client frames until the connection ends. It returns nil
// after CLOSE, a *wire.ProtocolError or *helloError for a violation, and
// the read error otherwise.
func (c *serverConn) readLoop() error {
	cfg := &c.srv.cfg
	rd, err := wire.NewReader(c.nc, wire.ServerBound, wire.ReaderConfig{MaxFrameSize: cfg.MaxFrameSize, BufferSize: cfg.ReadBufferSize})
	if err != nil {
		return err
	}
	c.nc.SetReadDeadline(time.Now().Add(cfg.HelloTimeout))
	f, err := rd.ReadFrame()
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return &helloError{class: wire.ClassProtocol, msg: fmt.Sprintf("no HELLO within %v", cfg.HelloTimeout)}
		}
		return err
	}
	if f.Type != wire.TypeHello {
		return &wire.ProtocolError{Type: f.Type, Reason: "first frame is not HELLO"}
	}
	if f.Hello.Version != wire.Version {
		return &helloError{class: wire.ClassProtocol, msg: fmt.Sprintf("protocol version %d not supported (speaks %d)", f.Hello.Version, wire.Version)}
	}
	if len(cfg.Token) > 0 && subtle.ConstantTimeCompare(f.Hello.Token, cfg.Token) != 1 {
		return &helloError{class: wire.ClassUnauthenticated, msg: "wrong token"}
	}
	c.nc.SetReadDeadline(time.Time{})
	c.mu.Lock()
	c.mu.ctrl = wire.AppendHelloAck(c.mu.ctrl, wire.HelloAck{Version: wire.Version})
	c.mu.Unlock()
	c.signal()

	for {
		f, err := rd.ReadFrame()
		if err != nil {
			return err
		}
		switch f.Type {
		case wire.TypeHello:
			return &wire.ProtocolError{Type: f.Type, Reason: "second HELLO"}
		case wire.TypeClose:
			return nil
		case wire.TypePartitionRequest:
			if err := c.onPartitionRequest(f.PartitionRequest); err != nil {
				return err
			}
		case wire.TypeAddCredit:
			if err := c.onAddCredit(f.AddCredit); err != nil {
				return err
			}
		case wire.TypeResumeConsumption:
			r, err := c.receiverFrame(f.Type, f.ResumeConsumption.Receiver)
			if err != nil {
				return err
			}
			if r != nil {
				c.onResume(r)
			}
		case wire.TypeCancelPartition:
			r, err := c.receiverFrame(f.Type, f.CancelPartition.Receiver)
			if err != nil {
				return err
			}
			if r != nil {
				c.release(r, false)
			}
		case wire.TypeNewBufferSize:
			// Buffer debloating: the producer cuts the receiver's next
			// buffers at this size.
			r, err := c.receiverFrame(f.Type, f.NewBufferSize.Receiver)
			if err != nil {
				return err
			}
			if r != nil {
				r.sub.SetBufferSize(int(min(f.NewBufferSize.Size, 1<<30)))
			}
		default:
			return &wire.ProtocolError{Type: f.Type, Reason: "unexpected frame"}
		}
	}
}

// receiverFrame finds the active reader of a client frame: nil if it was
// released (the frame is ignored), a protocol error if never requested.
func (c *serverConn) receiverFrame(t wire.MessageType, id uuid.UUID) (*serverReader, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.mu.active[id]; ok {
		return r, nil
	}
	if _, ok := c.mu.released[id]; ok {
		return nil, nil
	}
	return nil, &wire.ProtocolError{Type: t, Reason: fmt.Sprintf("receiver %s was never requested", id)}
}

func (c *serverConn) onPartitionRequest(m wire.PartitionRequest) error {
	const t = wire.TypePartitionRequest
	if m.InitialCredit > credit.MaxCredit {
		return &wire.ProtocolError{Type: t, Reason: fmt.Sprintf("initial credit %d exceeds 2^31-1", m.InitialCredit)}
	}
	if m.Receiver == uuid.Nil {
		return &wire.ProtocolError{Type: t, Reason: "zero receiver"}
	}
	c.mu.Lock()
	_, dup := c.mu.active[m.Receiver]
	c.mu.Unlock()
	if dup {
		return &wire.ProtocolError{Type: t, Reason: fmt.Sprintf("receiver %s is already active", m.Receiver)}
	}
	sp, sub, failed := c.srv.parts.lookup(m.Partition, m.Subpartition)
	switch {
	case sp == nil:
		c.notActive(m.Receiver, wire.ClassPartitionNotFound, fmt.Sprintf("partition %s not found", m.Partition))
		return nil
	case failed != nil:
		c.notActive(m.Receiver, wire.ClassProducerFailed, failed.Error())
		return nil
	case sub == nil:
		c.notActive(m.Receiver, wire.ClassPartitionNotFound,
			fmt.Sprintf("partition %s has no subpartition %d", m.Partition, m.Subpartition))
		return nil
	}
	sender, err := credit.NewSender(m.InitialCredit)
	if err != nil {
		return &wire.ProtocolError{Type: t, Reason: err.Error()}
	}
	r := &serverReader{conn: c, receiver: m.Receiver, part: sp, sub: sub, subIndex: int(m.Subpartition), sender: sender}
	if err := c.srv.parts.addReader(sp, r); err != nil {
		c.notActive(m.Receiver, wire.ClassProducerFailed, err.Error())
		return nil
	}
	c.parts[sp] = struct{}{}
	c.mu.Lock()
	if c.mu.closing {
		c.mu.Unlock()
		c.srv.parts.removeReader(r, readerNotAttached)
		return nil
	}
	c.mu.active[m.Receiver] = r
	delete(c.mu.released, m.Receiver)
	c.mu.Unlock()
	if err := sub.Attach(r); err != nil {
		c.mu.Lock()
		c.releaseLocked(r)
		c.mu.ctrl = wire.AppendErrorResponse(c.mu.ctrl, wire.ErrorResponse{Receiver: m.Receiver, Class: wire.ClassGeneric, Message: err.Error()})
		c.mu.Unlock()
		c.signal()
		c.srv.parts.removeReader(r, readerNotAttached)
		return nil
	}
	c.log.Debug("partition request", zap.Stringer("partition", m.Partition), zap.Uint32("subpartition", m.Subpartition),
		zap.Stringer("receiver", m.Receiver), zap.Uint32("credit", m.InitialCredit))
	return nil
}

// notActive answers a request that did not make its receiver active. The
// receiver counts as requested: later frames for it are ignored.
func (c *serverConn) notActive(receiver uuid.UUID, class wire.ErrorClass, msg string) {
	c.mu.Lock()
	c.mu.released[receiver] = struct{}{}
	c.mu.ctrl = wire.AppendErrorResponse(c.mu.ctrl, wire.ErrorResponse{Receiver: receiver, Class: class, Message: msg})
	c.mu.Unlock()
	c.signal()
}

func (c *serverConn) onAddCredit(m wire.AddCredit) error {
	c.mu.Lock()
	r, ok := c.mu.active[m.Receiver]
	if !ok {
		_, released := c.mu.released[m.Receiver]
		c.mu.Unlock()
		if released && m.Credit > 0 {
			return nil
		}
		if released {
			return &wire.ProtocolError{Type: wire.TypeAddCredit, Reason: "credit of 0"}
		}
		return &wire.ProtocolError{Type: wire.TypeAddCredit, Reason: fmt.Sprintf("receiver %s was never requested", m.Receiver)}
	}
	if err := r.sender.AddCredit(m.Credit); err != nil {
		c.mu.Unlock()
		return &wire.ProtocolError{Type: wire.TypeAddCredit, Reason: err.Error()}
	}
	ok = c.enqueueLocked(r)
	c.mu.Unlock()
	if ok {
		c.signal()
	}
	return nil
}

func (c *serverConn) onResume(r *serverReader) {
	c.mu.Lock()
	if r.released || r.sender.Resume() != nil {
		// Not blocked: nothing to resume (ignored, see docs/protocol.md
		// "Server behaviour").
		c.mu.Unlock()
		return
	}
	ok := c.enqueueLocked(r)
	c.mu.Unlock()
	if ok {
		c.signal()
	}
	r.sub.Resume()
}

// outFrame is what the writer sends next for a reader.
type outFrame struct {
	r        *serverReader
	buf      *buffer.Buffer
	hdr      wire.BufferResponseHeader
	announce bool // a BACKLOG_ANNOUNCEMENT follows
	backlog  int
	end      bool // the buffer is the end of partition
}

// next picks the next thing to write: control frames (returned in ctrl,
// swapped with spare) or one buffer of the first reader that can send.
// stop says the writer must stop after writing ctrl.
func (c *serverConn) next(spare []byte, out *outFrame) (ctrl []byte, have, stop bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.mu.ctrl) > 0 {
		ctrl, c.mu.ctrl = c.mu.ctrl, spare[:0]
		return ctrl, false, false
	}
	if c.mu.closing {
		return nil, false, true
	}
	for c.mu.head < len(c.mu.queue) {
		r := c.mu.queue[c.mu.head]
		c.mu.queue[c.mu.head] = nil
		c.mu.head++
		r.queued = false
		if r.released {
			continue
		}
		t, ok, backlog := r.sub.Peek()
		if !ok {
			continue // empty or blocked: NotifyDataAvailable queues it again
		}
		if !r.sender.CanSend(t.IsData()) {
			if r.sender.NeedBacklogAnnouncement(backlog) {
				ctrl = wire.AppendBacklogAnnouncement(spare[:0], wire.BacklogAnnouncement{Receiver: r.receiver, Backlog: uint32(backlog)})
				return ctrl, false, false
			}
			continue // AddCredit or Resume queues it again
		}
		p := r.sub.Poll()
		if p.Buffer == nil {
			continue
		}
		b := p.Buffer
		seq := r.sender.Sent(credit.DataType(b.Type()), 1)
		*out = outFrame{r: r, buf: b, backlog: p.Backlog}
		out.hdr = wire.BufferResponseHeader{Receiver: r.receiver, Sequence: seq, Backlog: int32(min(p.Backlog, 1<<31-1)),
			DataType: wire.DataType(b.Type()), Size: uint32(b.Len())}
		if b.Type() == buffer.Event && b.Len() > 0 && b.Bytes()[0] == byte(wire.EventEndOfPartition) {
			out.end = true
			r.released = true
			delete(c.mu.active, r.receiver)
			c.mu.released[r.receiver] = struct{}{}
		} else {
			out.announce = r.sender.NeedBacklogAnnouncement(p.Backlog)
			if p.More {
				c.enqueueLocked(r)
			}
		}
		return nil, true, false
	}
	return nil, false, false
}

// writeLoop is the connection's writer: it sends control frames and the
// buffers of readers with data and credit, flushing when nothing is left.
func (c *serverConn) writeLoop() {
	w := bufio.NewWriterSize(c.nc, c.srv.cfg.WriteBufferSize)
	spare := make([]byte, 0, 256)
	hdr := make([]byte, 0, 64)
	var out outFrame
	var werr error
	for {
		ctrl, have, stop := c.next(spare, &out)
		switch {
		case len(ctrl) > 0:
			if werr == nil {
				_, werr = w.Write(ctrl)
			}
			spare = ctrl
			continue
		case have:
			if werr == nil {
				hdr = wire.AppendBufferResponseHeader(hdr[:0], out.hdr)
				if _, werr = w.Write(hdr); werr == nil {
					_, werr = w.Write(out.buf.Bytes())
				}
				if werr == nil && out.announce {
					hdr = wire.AppendBacklogAnnouncement(hdr[:0], wire.BacklogAnnouncement{Receiver: out.r.receiver, Backlog: uint32(out.backlog)})
					_, werr = w.Write(hdr)
				}
			}
			out.buf.Release()
			if out.end {
				out.r.sub.Release()
				how := readerEnded
				if werr != nil {
					how = readerAbandoned
				}
				c.srv.parts.removeReader(out.r, how)
			}
			out = outFrame{}
			if werr != nil {
				c.nc.Close() // the reader goroutine sees the failure and tears down
			}
			continue
		}
		if werr == nil && w.Buffered() > 0 {
			if werr = w.Flush(); werr != nil {
				c.nc.Close()
			}
		}
		if stop {
			c.mu.Lock()
			fatal := c.mu.fatal
			c.mu.Unlock()
			if fatal && werr == nil {
				closeWrite(c.nc)
			}
			return
		}
		<-c.wake
	}
}

// closeWrite half-closes nc if it can.
func closeWrite(nc net.Conn) {
	switch x := nc.(type) {
	case interface{ CloseWrite() error }:
		x.CloseWrite()
	}
}
