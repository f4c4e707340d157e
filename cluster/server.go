package cluster

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// WorkerInfo describes a registered worker.
type WorkerInfo struct {
	ID       string
	DataAddr string // the worker's data-plane address (Register.DataAddr)
	Slots    int
	Peer     string // the network address its control stream came from
	// Features are the optional messages it understands
	// (Register.Features).
	Features []string
}

// Handler receives a Server's events. The calls for one worker come from
// one goroutine, in order: WorkerJoined, then every Message as received,
// then WorkerLost. Calls for different workers may run concurrently. A
// handler may call Send. It should return quickly: while it runs, that
// worker's messages queue up, and a worker whose messages back up longer
// than HeartbeatTimeout may be declared lost.
type Handler interface {
	// WorkerJoined reports a worker that registered. Send to it works from
	// now on; its Registered message is already queued.
	WorkerJoined(w WorkerInfo)
	// WorkerLost reports the end of a joined worker's stream: err says why
	// (ErrHeartbeatTimeout, ErrShutdown, ErrMalformed, or the stream's
	// error, all wrapped). Send to it fails with ErrNotConnected from the
	// start of this call; the ID may register again once it returns.
	WorkerLost(id string, err error)
	// Message delivers one message of a joined worker (never Register or
	// Heartbeat).
	Message(workerID string, m WorkerMessage)
}

// Server is the coordinator's end of the control plane: a gRPC service
// that workers connect to, one bidirectional stream each.
type Server struct {
	cfg      ServerConfig
	h        Handler
	log      *zap.Logger
	gs       *grpc.Server
	tokenSum [sha256.Size]byte

	closeOnce sync.Once
	closing   chan struct{} // closed when Close starts
	closed    chan struct{} // closed when Close has finished
	// wg counts the receive and send goroutines of worker streams. Their
	// stream handlers are counted by gs (WaitForHandlers), which Close
	// stops before waiting for wg.
	wg sync.WaitGroup

	mu struct {
		sync.Mutex
		serving bool
		workers map[string]*conn
		changed chan struct{} // closed and replaced whenever workers changes
	}
}

// conn is the server's side of one registered worker's stream.
type conn struct {
	info     WorkerInfo
	out      chan CoordinatorMessage // queued for the stream's sender
	done     chan struct{}           // closed when the stream is over
	shutdown atomic.Bool             // a Shutdown is queued: drop what follows
	leaving  atomic.Bool             // the Shutdown is being sent: the stream's end is expected
}

// NewServer returns a Server that reports to h. It starts nothing; call
// Serve.
func NewServer(cfg ServerConfig, h Handler) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("cluster: nil Handler")
	}
	cfg.ensureDefaults()
	s := &Server{
		cfg:     cfg,
		h:       h,
		log:     cfg.Logger.Named("cluster"),
		closing: make(chan struct{}),
		closed:  make(chan struct{}),
	}
	if cfg.Token != "" {
		s.tokenSum = sha256.Sum256([]byte(cfg.Token))
	}
	s.mu.workers = make(map[string]*conn)
	s.mu.changed = make(chan struct{})
	opts := []grpc.ServerOption{
		grpc.ForceServerCodec(jsonCodec{}),
		grpc.WaitForHandlers(true),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	s.gs = grpc.NewServer(opts...)
	s.gs.RegisterService(serviceDesc(), s)
	return s, nil
}

// Serve accepts workers on lis until ctx ends or Close is called, then
// shuts the server down as Close does. It returns nil after Close,
// ctx.Err() if ctx ended, ErrClosed if the server was closed or already
// serving, or the listener's error.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	s.mu.Lock()
	if s.isClosing() || s.mu.serving {
		s.mu.Unlock()
		return ErrClosed
	}
	s.mu.serving = true
	s.mu.Unlock()

	stop := context.AfterFunc(ctx, func() { _ = s.Close() })
	err := s.gs.Serve(lis)
	if stop() {
		// Serve ended on its own (listener failure) or through Close:
		// either way finish the shutdown before returning.
		_ = s.Close()
	} else {
		<-s.closed
	}
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, grpc.ErrServerStopped):
		return nil
	case err != nil:
		return fmt.Errorf("cluster: serve: %w", err)
	}
	return nil
}

// Close sends every connected worker Shutdown, waits up to
// HeartbeatTimeout for their streams to end, then stops the gRPC server
// and waits for all of the Server's goroutines. Handler.WorkerLost is
// called for every worker. Close is idempotent; every call waits.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		close(s.closing)
		conns := make([]*conn, 0, len(s.mu.workers))
		for _, c := range s.mu.workers {
			conns = append(conns, c)
		}
		s.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HeartbeatTimeout)
		for _, c := range conns {
			_ = s.enqueue(ctx, c, CoordinatorMessage{Shutdown: &Shutdown{Reason: "coordinator closing"}})
		}
		_ = s.waitFor(ctx, nil, func() bool { return len(s.mu.workers) == 0 })
		// GracefulStop lets the last messages (the Shutdowns) and statuses
		// reach the workers; Stop cuts off whatever is still stuck when the
		// grace period ends.
		graceful := make(chan struct{})
		go func() {
			s.gs.GracefulStop()
			close(graceful)
		}()
		select {
		case <-graceful:
		case <-ctx.Done():
			s.gs.Stop()
			<-graceful
		}
		cancel()
		s.wg.Wait()
		s.log.Info("server closed")
		close(s.closed)
	})
	<-s.closed
	return nil
}

// Send queues m for workerID. Messages Sent to one worker are sent in the
// order their Send calls returned. Send blocks while the worker's queue is
// full, until ctx ends; it returns ErrNotConnected if the worker is not
// registered or is gone (Send returning nil does not prove delivery), and
// an ErrMalformed error unless exactly one field of m other than
// Registered is set. After a Shutdown, the worker's stream ends and later
// messages are refused.
func (s *Server) Send(ctx context.Context, workerID string, m CoordinatorMessage) error {
	if _, err := m.kind(); err != nil {
		return err
	}
	if m.Registered != nil {
		return fmt.Errorf("%w: Registered is sent by the Server only", ErrMalformed)
	}
	s.mu.Lock()
	c := s.mu.workers[workerID]
	s.mu.Unlock()
	if c == nil {
		return fmt.Errorf("%w: %q", ErrNotConnected, workerID)
	}
	return s.enqueue(ctx, c, m)
}

func (s *Server) enqueue(ctx context.Context, c *conn, m CoordinatorMessage) error {
	if m.Shutdown != nil {
		if c.shutdown.Swap(true) {
			return fmt.Errorf("%w: %q is shutting down", ErrNotConnected, c.info.ID)
		}
	} else if c.shutdown.Load() {
		return fmt.Errorf("%w: %q is shutting down", ErrNotConnected, c.info.ID)
	}
	select {
	case <-c.done:
		return fmt.Errorf("%w: %q", ErrNotConnected, c.info.ID)
	default:
	}
	var err error
	select {
	case c.out <- m:
		return nil
	case <-c.done:
		err = fmt.Errorf("%w: %q", ErrNotConnected, c.info.ID)
	case <-ctx.Done():
		err = ctx.Err()
	}
	if m.Shutdown != nil {
		c.shutdown.Store(false) // not queued after all
	}
	return err
}

// Workers returns the registered workers, sorted by ID.
func (s *Server) Workers() []WorkerInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.workersLocked()
}

func (s *Server) workersLocked() []WorkerInfo {
	ws := make([]WorkerInfo, 0, len(s.mu.workers))
	for _, c := range s.mu.workers {
		select {
		case <-c.done:
		default:
			ws = append(ws, c.info)
		}
	}
	slices.SortFunc(ws, func(a, b WorkerInfo) int { return strings.Compare(a.ID, b.ID) })
	return ws
}

// WaitWorkers blocks until at least n workers are registered and returns
// them (as Workers). It returns ctx.Err() if ctx ends first and ErrClosed
// if Close starts first.
func (s *Server) WaitWorkers(ctx context.Context, n int) ([]WorkerInfo, error) {
	var ws []WorkerInfo
	err := s.waitFor(ctx, s.closing, func() bool {
		ws = s.workersLocked()
		return len(ws) >= n
	})
	if err != nil {
		return nil, err
	}
	return ws, nil
}

// waitFor blocks until cond (called with s.mu held) holds. It returns
// ctx.Err() if ctx ends first and ErrClosed if abort is closed first.
func (s *Server) waitFor(ctx context.Context, abort <-chan struct{}, cond func() bool) error {
	for {
		s.mu.Lock()
		ok := cond()
		changed := s.mu.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-abort:
			return ErrClosed
		}
	}
}

func (s *Server) isClosing() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// changedLocked wakes every waitFor.
func (s *Server) changedLocked() {
	close(s.mu.changed)
	s.mu.changed = make(chan struct{})
}

func (s *Server) authenticate(ctx context.Context) error {
	if s.cfg.Token == "" {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(tokenKey)
	if len(vals) == 0 {
		return status.Error(codes.Unauthenticated, "cluster: missing token")
	}
	// Comparing digests keeps the comparison constant-time in the token's
	// length too.
	sum := sha256.Sum256([]byte(vals[0]))
	if len(vals) != 1 || subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) != 1 {
		return status.Error(codes.Unauthenticated, "cluster: wrong token")
	}
	return nil
}

// connect serves one worker's stream, from its Register to its end. It is
// the gRPC stream handler; it returns the status the worker receives.
func (s *Server) connect(ss grpc.ServerStream) error {
	ctx := ss.Context()
	remote := "unknown"
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
	}
	if err := s.authenticate(ctx); err != nil {
		s.log.Warn("worker refused", zap.String("peer", remote), zap.Error(err))
		return err
	}

	var seen atomic.Int64
	seen.Store(time.Now().UnixNano())
	in := make(chan inbound[WorkerMessage], 64)
	stop := make(chan struct{})
	defer close(stop)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		pump(ss.RecvMsg, in, stop, &seen)
	}()

	reg, err := s.awaitRegister(ctx, in)
	if err != nil {
		s.log.Warn("registration failed", zap.String("peer", remote), zap.Error(err))
		return err
	}
	c := &conn{
		info: WorkerInfo{ID: reg.WorkerID, DataAddr: reg.DataAddr, Slots: reg.Slots, Peer: remote, Features: reg.Features},
		out:  make(chan CoordinatorMessage, s.cfg.QueueSize),
		done: make(chan struct{}),
	}
	c.out <- CoordinatorMessage{Registered: &Registered{WorkerID: reg.WorkerID}}
	if err := s.join(c); err != nil {
		s.log.Warn("registration refused", zap.String("peer", remote), zap.Error(err))
		return err
	}
	log := s.log.With(zap.String("worker", c.info.ID))
	log.Info("worker joined", zap.String("peer", remote), zap.String("data_addr", c.info.DataAddr))

	sent := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		transmit(ss.SendMsg, c.out, CoordinatorMessage{Heartbeat: &Heartbeat{}}, s.cfg.HeartbeatInterval,
			func(m *CoordinatorMessage) bool {
				if m.Shutdown == nil {
					return false
				}
				c.leaving.Store(true)
				return true
			}, stop, sent)
	}()
	s.h.WorkerJoined(c.info)

	cause, st := s.serveWorker(c, in, sent, &seen)
	if c.leaving.Load() {
		// The worker was told to go: whatever ended the stream after that
		// (the worker leaving first, say) is the expected consequence.
		cause, st = ErrShutdown, nil
	}
	close(c.done)
	log.Info("worker lost", zap.Error(cause))
	s.h.WorkerLost(c.info.ID, cause)
	s.mu.Lock()
	delete(s.mu.workers, c.info.ID)
	s.changedLocked()
	s.mu.Unlock()
	return st
}

// join adds c to the registered workers.
func (s *Server) join(c *conn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isClosing() {
		return status.Error(codes.Unavailable, "cluster: coordinator is closing")
	}
	if _, ok := s.mu.workers[c.info.ID]; ok {
		return status.Errorf(codes.AlreadyExists, "cluster: worker %q is already registered", c.info.ID)
	}
	s.mu.workers[c.info.ID] = c
	s.changedLocked()
	return nil
}

// awaitRegister waits for the stream's first message, which must be a
// valid Register with the server's fingerprint.
func (s *Server) awaitRegister(ctx context.Context, in <-chan inbound[WorkerMessage]) (*Register, error) {
	t := time.NewTimer(s.cfg.RegisterTimeout)
	defer t.Stop()
	var r inbound[WorkerMessage]
	select {
	case r = <-in:
	case <-t.C:
		return nil, status.Errorf(codes.DeadlineExceeded, "cluster: no Register within %v", s.cfg.RegisterTimeout)
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-s.closing:
		return nil, status.Error(codes.Unavailable, "cluster: coordinator is closing")
	}
	if r.err != nil {
		return nil, recvStatus(r.err)
	}
	kind, err := r.m.kind()
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	reg := r.m.Register
	switch {
	case reg == nil:
		return nil, status.Errorf(codes.InvalidArgument, "%v: first message must be Register, got %s", ErrMalformed, kind)
	case reg.WorkerID == "":
		return nil, status.Errorf(codes.InvalidArgument, "%v: Register without WorkerID", ErrMalformed)
	case reg.Slots < 0:
		return nil, status.Errorf(codes.InvalidArgument, "%v: Register with negative Slots %d", ErrMalformed, reg.Slots)
	case reg.Fingerprint != s.cfg.Fingerprint:
		return nil, status.Errorf(codes.FailedPrecondition,
			"cluster: worker %q has job graph fingerprint %q, the coordinator %q: both must run the same binary and job",
			reg.WorkerID, reg.Fingerprint, s.cfg.Fingerprint)
	}
	return reg, nil
}

// serveWorker runs a joined worker's stream until it ends. It returns why
// (for WorkerLost) and the status to end the stream with.
func (s *Server) serveWorker(c *conn, in <-chan inbound[WorkerMessage],
	sent <-chan error, seen *atomic.Int64) (cause, st error) {
	check := time.NewTicker(s.cfg.HeartbeatInterval)
	defer check.Stop()
	for {
		select {
		case r := <-in:
			if r.err != nil {
				if r.err == io.EOF {
					return errors.New("cluster: worker closed its stream"), nil
				}
				st := recvStatus(r.err)
				if status.Code(r.err) == codes.Canceled {
					return ErrDisconnected, st
				}
				return fmt.Errorf("cluster: worker stream: %w", st), st
			}
			kind, err := r.m.kind()
			if err == nil && r.m.Register != nil {
				err = fmt.Errorf("%w: Register on a registered stream", ErrMalformed)
			}
			if err != nil {
				return err, status.Error(codes.InvalidArgument, err.Error())
			}
			if kind == "Heartbeat" {
				continue
			}
			s.h.Message(c.info.ID, r.m)
		case err := <-sent:
			if err == nil { // Shutdown sent
				return ErrShutdown, nil
			}
			// The stream is broken; its receive side reports why.
			s.log.Debug("send failed", zap.String("worker", c.info.ID), zap.Error(err))
			sent = nil
		case <-check.C:
			if d := silence(seen); d > s.cfg.HeartbeatTimeout {
				err := fmt.Errorf("%w: worker %q silent for %v", ErrHeartbeatTimeout, c.info.ID, d.Round(time.Millisecond))
				return err, status.Error(codes.DeadlineExceeded, err.Error())
			}
		}
		// No case for ctx: when the stream ends, the pump's RecvMsg fails
		// and its error, the more precise cause, arrives on in.
	}
}

// disconnected reports whether err, what a stream's RecvMsg returned, is
// its peer's connection closing without a goodbye (a killed process, a
// broken network): gRPC reports it to a server as a canceled stream, to a
// client as an unavailable one.
func disconnected(err error) bool {
	switch status.Code(err) {
	case codes.Canceled, codes.Unavailable:
		return true
	}
	return false
}

// recvStatus is the status a stream ends with after RecvMsg failed. gRPC
// has already sent its own status by then (codes.Internal for an
// undecodable message, the message naming ErrMalformed).
func recvStatus(err error) error {
	if err == io.EOF {
		return status.Errorf(codes.InvalidArgument, "%v: stream closed before Register", ErrMalformed)
	}
	return status.Convert(err).Err()
}
