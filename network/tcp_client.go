package network

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/weirstream/weir/network/wire"
)

// Client defaults.
const (
	// DefaultDialTimeout bounds dialing and the HELLO handshake.
	DefaultDialTimeout = 10 * time.Second
	// DefaultRetryInitialBackoff is the first wait before a partition
	// request that found no partition is retried.
	DefaultRetryInitialBackoff = 100 * time.Millisecond
	// DefaultRetryMaxBackoff is the longest wait between retries; once it
	// was waited, the next "partition not found" fails the channel.
	DefaultRetryMaxBackoff = 10 * time.Second
)

// Client errors.
var (
	// ErrConnectionLost fails every channel of a connection that dropped.
	ErrConnectionLost = errors.New("network: connection lost")
	// ErrManagerClosed is returned when a channel starts after its
	// ConnectionManager was closed.
	ErrManagerClosed = errors.New("network: connection manager closed")
)

// RemoteError is an ERROR_RESPONSE the server sent: for one channel, or
// (Fatal) for the whole connection.
type RemoteError struct {
	Addr    string
	Class   wire.ErrorClass
	Message string
	Fatal   bool
}

func (e *RemoteError) Error() string {
	scope := "channel"
	if e.Fatal {
		scope = "connection"
	}
	return fmt.Sprintf("network: server %s: %s error (%s): %s", e.Addr, e.Class, scope, e.Message)
}

// ClientConfig configures a ConnectionManager. The zero value means the
// defaults.
type ClientConfig struct {
	// Token is sent in HELLO.
	Token []byte
	// TLS, if not nil, wraps every connection (set Certificates for mutual
	// TLS). ServerName defaults to the dialled host.
	TLS *tls.Config
	// DialTimeout bounds dialing plus the handshake (default 10 s).
	DialTimeout time.Duration
	// MaxFrameSize is the largest frame length accepted (default
	// wire.DefaultMaxFrameSize).
	MaxFrameSize int
	// ReadBufferSize and WriteBufferSize size the per-connection buffered
	// reader and writer (defaults wire.DefaultReadBufferSize, 32 KiB).
	ReadBufferSize  int
	WriteBufferSize int
	// RetryInitialBackoff and RetryMaxBackoff shape the retries of a
	// partition request answered "partition not found": the wait starts
	// at the initial backoff and doubles up to the maximum; the answer
	// after the maximum wait fails the channel (defaults 100 ms, 10 s).
	RetryInitialBackoff time.Duration
	RetryMaxBackoff     time.Duration
	// Dial, if not nil, opens the TCP connection (tests inject faults
	// here); by default a net.Dialer.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

// WithDefaults returns c with zero values replaced by the defaults.
func (c ClientConfig) WithDefaults() ClientConfig {
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.MaxFrameSize == 0 {
		c.MaxFrameSize = wire.DefaultMaxFrameSize
	}
	if c.ReadBufferSize == 0 {
		c.ReadBufferSize = wire.DefaultReadBufferSize
	}
	if c.WriteBufferSize == 0 {
		c.WriteBufferSize = 32 << 10
	}
	if c.RetryInitialBackoff == 0 {
		c.RetryInitialBackoff = DefaultRetryInitialBackoff
	}
	if c.RetryMaxBackoff == 0 {
		c.RetryMaxBackoff = DefaultRetryMaxBackoff
	}
	return c
}

// Validate reports a value out of range.
func (c ClientConfig) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.DialTimeout < 0:
		return fmt.Errorf("network: client: negative DialTimeout %v", c.DialTimeout)
	case c.RetryInitialBackoff < 0 || c.RetryMaxBackoff < c.RetryInitialBackoff:
		return fmt.Errorf("network: client: retry backoff %v..%v invalid", c.RetryInitialBackoff, c.RetryMaxBackoff)
	case c.WriteBufferSize < 64:
		return fmt.Errorf("network: client: WriteBufferSize %d below 64", c.WriteBufferSize)
	case len(c.Token) > 1<<16-1:
		return fmt.Errorf("network: client: token of %d bytes exceeds 65535", len(c.Token))
	}
	if err := (wire.ReaderConfig{MaxFrameSize: c.MaxFrameSize, BufferSize: c.ReadBufferSize}).Validate(); err != nil {
		return fmt.Errorf("network: client: %w", err)
	}
	return nil
}

// ConnectionManager keeps one connection per remote address (Flink's
// PartitionRequestClientFactory): dialled lazily by the first
// RemoteChannel that starts towards the address, shared by every channel
// to it, with one goroutine reading and one writing. A connection that
// drops fails its channels and is dialled anew for channels started
// later. It is safe for concurrent use.
//
// Close it after the gates of its channels and before closing the buffer
// pools they use.
type ConnectionManager struct {
	cfg    ClientConfig
	log    *zap.Logger
	ctx    context.Context
	cancel context.CancelFunc

	mu struct {
		sync.Mutex
		conns  map[string]*clientConn
		closed bool
	}
	wg sync.WaitGroup
}

// NewConnectionManager returns a manager that dials nothing yet. log may
// be nil.
func NewConnectionManager(cfg ClientConfig, log *zap.Logger) (*ConnectionManager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	m := &ConnectionManager{cfg: cfg.WithDefaults(), log: log}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.mu.conns = make(map[string]*clientConn)
	return m, nil
}

// Close sends CLOSE on every connection, closes them, fails the channels
// still using them and waits for every goroutine. It is idempotent.
func (m *ConnectionManager) Close() error {
	m.mu.Lock()
	m.mu.closed = true
	conns := make([]*clientConn, 0, len(m.mu.conns))
	for _, c := range m.mu.conns {
		conns = append(conns, c)
	}
	m.mu.Unlock()
	m.cancel()
	for _, c := range conns {
		c.shutdown()
	}
	m.wg.Wait()
	return nil
}

// NumConnections returns the number of connections open or being opened.
func (m *ConnectionManager) NumConnections() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mu.conns)
}

// connection returns the connection to addr, dialling it if there is none.
func (m *ConnectionManager) connection(addr string) (*clientConn, error) {
	m.mu.Lock()
	if m.mu.closed {
		m.mu.Unlock()
		return nil, ErrManagerClosed
	}
	c, ok := m.mu.conns[addr]
	if !ok {
		c = &clientConn{m: m, addr: addr, ready: make(chan struct{}), wake: make(chan struct{}, 1),
			log: m.log.With(zap.String("remote", addr))}
		c.mu.channels = make(map[uuid.UUID]*RemoteChannel)
		m.mu.conns[addr] = c
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			c.run()
		}()
	}
	m.mu.Unlock()
	<-c.ready
	if c.dialErr != nil {
		return nil, c.dialErr
	}
	return c, nil
}

func (m *ConnectionManager) forget(c *clientConn) {
	m.mu.Lock()
	if m.mu.conns[c.addr] == c {
		delete(m.mu.conns, c.addr)
	}
	m.mu.Unlock()
}

func (m *ConnectionManager) dial(ctx context.Context, addr string) (net.Conn, error) {
	if m.cfg.Dial != nil {
		return m.cfg.Dial(ctx, addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// clientConn is one connection to a server. Lock order: RemoteBuffers.mu,
// RemoteChannel.mu, clientConn.mu (see RemoteBuffers.dispatchLocked).
type clientConn struct {
	m    *ConnectionManager
	addr string
	log  *zap.Logger
	nc   net.Conn

	ready   chan struct{} // closed once dialled and handshaken (or failed)
	dialErr error         // set before ready is closed
	wake    chan struct{} // capacity 1: the writer has work

	mu struct {
		sync.Mutex
		channels map[uuid.UUID]*RemoteChannel
		ctrl     []byte           // encoded frames to send
		credit   []*RemoteChannel // channels with unannounced credit
		closing  bool             // send CLOSE and stop
		dead     bool             // the connection failed; no more channels
	}
}

func (c *clientConn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// run dials, handshakes and then reads until the connection ends.
func (c *clientConn) run() {
	nc, rd, err := c.connect()
	if err != nil {
		c.dialErr = fmt.Errorf("network: connecting to %s: %w", c.addr, err)
		c.mu.Lock()
		c.mu.dead = true
		c.mu.Unlock()
		c.m.forget(c)
		close(c.ready)
		return
	}
	c.nc = nc
	close(c.ready)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	err = c.readLoop(rd)
	c.m.forget(c)
	err = fmt.Errorf("%w: %s: %w", ErrConnectionLost, c.addr, err)
	c.log.Debug("connection ended", zap.Error(err))
	c.mu.Lock()
	c.mu.dead = true
	c.mu.closing = true
	chans := make([]*RemoteChannel, 0, len(c.mu.channels))
	for _, ch := range c.mu.channels {
		chans = append(chans, ch)
	}
	clear(c.mu.channels)
	c.mu.Unlock()
	c.signal()
	nc.Close()
	<-writerDone
	for _, ch := range chans {
		ch.fail(err, false)
	}
}

func (c *clientConn) connect() (net.Conn, *wire.Reader, error) {
	cfg := &c.m.cfg
	ctx, cancel := context.WithTimeout(c.m.ctx, cfg.DialTimeout)
	defer cancel()
	nc, err := c.m.dial(ctx, c.addr)
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	if cfg.TLS != nil {
		tc := cfg.TLS
		if tc.ServerName == "" {
			tc = tc.Clone()
			host, _, err := net.SplitHostPort(c.addr)
			if err != nil {
				host = c.addr
			}
			tc.ServerName = host
		}
		tcn := tls.Client(nc, tc)
		if err := tcn.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, nil, fmt.Errorf("TLS handshake: %w", err)
		}
		nc = tcn
	}
	if _, err := nc.Write(wire.AppendHello(nil, wire.Hello{Version: wire.Version, Token: cfg.Token})); err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("sending HELLO: %w", err)
	}
	rd, err := wire.NewReader(nc, wire.ClientBound, wire.ReaderConfig{MaxFrameSize: cfg.MaxFrameSize, BufferSize: cfg.ReadBufferSize})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	f, err := rd.ReadFrame()
	if err == nil && f.Type == wire.TypeErrorResponse {
		err = &RemoteError{Addr: c.addr, Class: f.ErrorResponse.Class, Message: f.ErrorResponse.Message, Fatal: true}
	} else if err == nil && f.Type != wire.TypeHelloAck {
		err = &wire.ProtocolError{Type: f.Type, Reason: "expected HELLO_ACK"}
	} else if err == nil && f.HelloAck.Version != wire.Version {
		err = fmt.Errorf("server speaks protocol version %d, want %d", f.HelloAck.Version, wire.Version)
	}
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("handshake: %w", err)
	}
	if !stop() {
		nc.Close()
		return nil, nil, ctx.Err()
	}
	return nc, rd, nil
}

// shutdown sends CLOSE and closes the connection (manager Close).
func (c *clientConn) shutdown() {
	<-c.ready
	if c.dialErr != nil {
		return
	}
	c.mu.Lock()
	if !c.mu.closing {
		c.mu.closing = true
		c.mu.ctrl = wire.AppendClose(c.mu.ctrl)
	}
	c.mu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	c.signal()
}

// register adds ch and queues its PARTITION_REQUEST. It fails if the
// connection is dead.
func (c *clientConn) register(ch *RemoteChannel, req wire.PartitionRequest) error {
	c.mu.Lock()
	if c.mu.dead || c.mu.closing {
		c.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrConnectionLost, c.addr)
	}
	c.mu.channels[req.Receiver] = ch
	c.mu.ctrl = wire.AppendPartitionRequest(c.mu.ctrl, req)
	c.mu.Unlock()
	c.signal()
	return nil
}

// request queues a (repeated) PARTITION_REQUEST for a registered channel.
func (c *clientConn) request(req wire.PartitionRequest) {
	c.mu.Lock()
	if _, ok := c.mu.channels[req.Receiver]; ok && !c.mu.closing {
		c.mu.ctrl = wire.AppendPartitionRequest(c.mu.ctrl, req)
	}
	c.mu.Unlock()
	c.signal()
}

// unregister forgets ch; cancel queues CANCEL_PARTITION for it.
func (c *clientConn) unregister(ch *RemoteChannel, cancel bool) {
	c.mu.Lock()
	if c.mu.channels[ch.receiver] == ch {
		delete(c.mu.channels, ch.receiver)
		if cancel && !c.mu.closing {
			c.mu.ctrl = wire.AppendCancelPartition(c.mu.ctrl, wire.CancelPartition{Receiver: ch.receiver})
		}
	}
	c.mu.Unlock()
	c.signal()
}

func (c *clientConn) resume(ch *RemoteChannel) {
	c.mu.Lock()
	if c.mu.channels[ch.receiver] == ch && !c.mu.closing {
		c.mu.ctrl = wire.AppendResumeConsumption(c.mu.ctrl, wire.ResumeConsumption{Receiver: ch.receiver})
	}
	c.mu.Unlock()
	c.signal()
}

// wantCredit queues ch to have its unannounced credit sent.
func (c *clientConn) wantCredit(ch *RemoteChannel) {
	c.mu.Lock()
	if ch.creditQueued || c.mu.closing {
		c.mu.Unlock()
		return
	}
	ch.creditQueued = true
	c.mu.credit = append(c.mu.credit, ch)
	c.mu.Unlock()
	c.signal()
}

func (c *clientConn) lookup(id uuid.UUID) *RemoteChannel {
	c.mu.Lock()
	ch := c.mu.channels[id]
	c.mu.Unlock()
	return ch
}

// writeLoop sends queued control frames and coalesced ADD_CREDITs.
func (c *clientConn) writeLoop() {
	w := bufio.NewWriterSize(c.nc, c.m.cfg.WriteBufferSize)
	var spare []byte
	var credits []*RemoteChannel
	var werr error
	for {
		c.mu.Lock()
		ctrl := c.mu.ctrl
		c.mu.ctrl = spare[:0]
		credits, c.mu.credit = c.mu.credit, credits[:0]
		for _, ch := range credits {
			ch.creditQueued = false
		}
		closing := c.mu.closing
		c.mu.Unlock()
		for i, ch := range credits {
			if n := ch.takeCredit(); n > 0 {
				ctrl = wire.AppendAddCredit(ctrl, wire.AddCredit{Receiver: ch.receiver, Credit: uint32(n)})
			}
			credits[i] = nil
		}
		if len(ctrl) > 0 && werr == nil {
			if _, werr = w.Write(ctrl); werr == nil {
				werr = w.Flush()
			}
			if werr != nil {
				c.nc.Close()
			}
		}
		spare = ctrl
		if closing {
			if c.m.ctx.Err() != nil && werr == nil {
				// Manager Close: CLOSE is out; half-close and give the
				// server a moment to close its side.
				closeWrite(c.nc)
				c.nc.SetReadDeadline(time.Now().Add(time.Second))
			}
			return
		}
		if len(ctrl) == 0 {
			<-c.wake
		}
	}
}

// readLoop reads server frames until the connection ends, returning why.
func (c *clientConn) readLoop(rd *wire.Reader) error {
	for {
		f, err := rd.ReadFrame()
		if err != nil {
			return err
		}
		switch f.Type {
		case wire.TypeBufferResponse:
			h := &f.BufferResponse
			ch := c.lookup(h.Receiver)
			if ch == nil {
				if err := rd.DiscardPayload(); err != nil {
					return err
				}
				continue
			}
			if err := ch.onBuffer(rd, h); err != nil {
				return err
			}
		case wire.TypeBacklogAnnouncement:
			if ch := c.lookup(f.BacklogAnnouncement.Receiver); ch != nil {
				ch.onBacklog(f.BacklogAnnouncement.Backlog)
			}
		case wire.TypeErrorResponse:
			e := &f.ErrorResponse
			if e.Fatal() {
				return &RemoteError{Addr: c.addr, Class: e.Class, Message: e.Message, Fatal: true}
			}
			if ch := c.lookup(e.Receiver); ch != nil {
				ch.onError(e.Class, e.Message)
			}
		default:
			return &wire.ProtocolError{Type: f.Type, Reason: "unexpected frame after handshake"}
		}
	}
}
