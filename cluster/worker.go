package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// WorkerHandler runs a worker's side of the job. RunWorker calls it from
// one goroutine: Connected once, then Command for each message in order.
type WorkerHandler interface {
	// Connected hands over the session, once registration succeeded and
	// before the first Command. s stays usable (from any goroutine) until
	// the session ends.
	Connected(s *Session)
	// Command handles one message from the coordinator, in the order sent.
	// Registered and Heartbeat are not delivered; Shutdown is, last. ctx
	// ends with the session. A non-nil error ends the session and
	// RunWorker returns it. Command should return quickly: a worker that
	// falls more than its queue behind stops reading its stream, and the
	// coordinator may then declare it lost.
	Command(ctx context.Context, m CoordinatorMessage) error
}

// Session is a worker's registered connection to the coordinator.
type Session struct {
	workerID string
	out      chan WorkerMessage
	done     chan struct{} // closed when the session ends
}

// WorkerID is the ID the session registered with.
func (s *Session) WorkerID() string { return s.workerID }

// Send queues m for the coordinator. Messages are sent in the order their
// Send calls returned. It is safe for concurrent use; it blocks while the
// queue is full, until ctx ends. It returns ErrSessionClosed after the
// session ended (nil does not prove delivery) and an ErrMalformed error
// unless exactly one field of m other than Register is set.
func (s *Session) Send(ctx context.Context, m WorkerMessage) error {
	if _, err := m.kind(); err != nil {
		return err
	}
	if m.Register != nil {
		return fmt.Errorf("%w: Register is sent by RunWorker only", ErrMalformed)
	}
	select {
	case <-s.done:
		return ErrSessionClosed
	default:
	}
	select {
	case s.out <- m:
		return nil
	case <-s.done:
		return ErrSessionClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RunWorker connects to the coordinator, registers, and runs the session
// until it ends. Until the first registration succeeds it retries failed
// attempts with backoff, for up to cfg.RetryTimeout (0: until ctx ends);
// a rejection it cannot outwait (wrong fingerprint or token, invalid
// registration) ends it at once with an error wrapping ErrRejected.
//
// It returns nil after the coordinator's Shutdown, ctx.Err() when ctx
// ends, an error wrapping ErrCoordinatorLost when the stream breaks or
// the coordinator stays silent for cfg.HeartbeatTimeout, or the error of
// h.Command. It does not reconnect a lost session: the job's attempt on
// this worker is gone, and the caller decides what follows. No goroutine
// it started outlives it.
func RunWorker(ctx context.Context, cfg WorkerConfig, h WorkerHandler) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if h == nil {
		return errors.New("cluster: nil WorkerHandler")
	}
	cfg.ensureDefaults()
	log := cfg.Logger.Named("cluster").With(zap.String("worker", cfg.Register.WorkerID),
		zap.String("coordinator", cfg.Coordinator))

	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	target := cfg.Coordinator
	if !strings.Contains(target, ":///") {
		target = "passthrough:///" + target
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(jsonCodec{})),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: cfg.DialTimeout,
		}),
	}
	if cfg.dial != nil {
		opts = append(opts, grpc.WithContextDialer(cfg.dial))
	}
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		return fmt.Errorf("cluster: coordinator address %q: %w", cfg.Coordinator, err)
	}
	defer cc.Close()

	st, err := registerWithRetry(ctx, cfg, cc, log)
	if err != nil {
		return err
	}
	log.Info("registered")
	err = st.run(ctx, cfg, h)
	if err != nil {
		log.Warn("session ended", zap.Error(err))
	} else {
		log.Info("shut down by the coordinator")
	}
	return err
}

// stream is an established, registered control stream.
type stream struct {
	ctx    context.Context // the stream's; ends with the session
	cancel context.CancelCauseFunc
	cs     grpc.ClientStream
}

var errAttemptTimeout = errors.New("cluster: connect and register timed out")

// registerWithRetry makes attempts to open a stream and register until
// one succeeds, a rejection is final, or time is up.
func registerWithRetry(ctx context.Context, cfg WorkerConfig, cc *grpc.ClientConn, log *zap.Logger) (*stream, error) {
	var deadline time.Time
	if cfg.RetryTimeout > 0 {
		deadline = time.Now().Add(cfg.RetryTimeout)
	}
	delay := 50 * time.Millisecond
	for n := 1; ; n++ {
		st, err := register(ctx, cfg, cc)
		if err == nil {
			return st, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		code := status.Code(err)
		switch code {
		case codes.Unauthenticated, codes.PermissionDenied, codes.FailedPrecondition, codes.InvalidArgument:
			return nil, fmt.Errorf("%w: %w", ErrRejected, err)
		}
		wait := delay/2 + rand.N(delay/2+1)
		delay = min(2*delay, 2*time.Second)
		if !deadline.IsZero() && time.Now().Add(wait).After(deadline) {
			if code == codes.AlreadyExists {
				err = fmt.Errorf("%w: %w", ErrRejected, err)
			}
			return nil, fmt.Errorf("cluster: no registration with %s within %v (%d attempts): %w",
				cfg.Coordinator, cfg.RetryTimeout, n, err)
		}
		log.Debug("registration attempt failed", zap.Int("attempt", n), zap.Duration("retry_in", wait), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
}

// register makes one attempt, bounded by cfg.DialTimeout: open the stream,
// send Register, and wait for Registered.
func register(ctx context.Context, cfg WorkerConfig, cc *grpc.ClientConn) (*stream, error) {
	sctx, cancel := context.WithCancelCause(ctx)
	if cfg.Token != "" {
		sctx = metadata.AppendToOutgoingContext(sctx, tokenKey, cfg.Token)
	}
	timer := time.AfterFunc(cfg.DialTimeout, func() { cancel(errAttemptTimeout) })
	st, err := func() (*stream, error) {
		cs, err := cc.NewStream(sctx, &connectStream, connectMethod)
		if err != nil {
			return nil, err
		}
		reg := cfg.Register
		if err := cs.SendMsg(&WorkerMessage{Register: &reg}); err != nil && err != io.EOF {
			return nil, err
		}
		// After io.EOF from SendMsg, RecvMsg returns the stream's status.
		var m CoordinatorMessage
		if err := cs.RecvMsg(&m); err != nil {
			return nil, err
		}
		if _, err := m.kind(); err != nil || m.Registered == nil {
			return nil, status.Errorf(codes.Internal, "cluster: coordinator answered Register with %+v, not Registered", m)
		}
		return &stream{ctx: sctx, cancel: cancel, cs: cs}, nil
	}()
	if !timer.Stop() && err == nil {
		err = errAttemptTimeout
	}
	if err != nil {
		cancel(err)
		if errors.Is(context.Cause(sctx), errAttemptTimeout) && ctx.Err() == nil {
			err = status.Errorf(codes.DeadlineExceeded, "%v after %v: %v", errAttemptTimeout, cfg.DialTimeout, err)
		}
		return nil, err
	}
	return st, nil
}

// run serves a registered stream until the session ends.
func (st *stream) run(ctx context.Context, cfg WorkerConfig, h WorkerHandler) error {
	sess := &Session{
		workerID: cfg.Register.WorkerID,
		out:      make(chan WorkerMessage, cfg.QueueSize),
		done:     make(chan struct{}),
	}
	var seen atomic.Int64
	seen.Store(time.Now().UnixNano())
	in := make(chan inbound[CoordinatorMessage], 64)
	stop := make(chan struct{})
	sent := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() { pump(st.cs.RecvMsg, in, stop, &seen) })
	wg.Go(func() {
		transmit(st.cs.SendMsg, sess.out, WorkerMessage{Heartbeat: &Heartbeat{}}, cfg.HeartbeatInterval, nil, stop, sent)
	})
	defer func() {
		close(sess.done)
		st.cancel(ErrSessionClosed)
		close(stop)
		wg.Wait()
	}()

	h.Connected(sess)
	check := time.NewTicker(cfg.HeartbeatInterval)
	defer check.Stop()
	for {
		select {
		case r := <-in:
			if r.err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if r.err == io.EOF {
					return fmt.Errorf("%w: stream ended without Shutdown", ErrCoordinatorLost)
				}
				if disconnected(r.err) {
					return fmt.Errorf("%w: %w: %w", ErrCoordinatorLost, ErrDisconnected, r.err)
				}
				return fmt.Errorf("%w: %w", ErrCoordinatorLost, r.err)
			}
			kind, err := r.m.kind()
			if err != nil {
				return fmt.Errorf("%w: coordinator sent %w", ErrCoordinatorLost, err)
			}
			switch kind {
			case "Heartbeat":
				continue
			case "Registered":
				return fmt.Errorf("%w: coordinator sent %w: Registered twice", ErrCoordinatorLost, ErrMalformed)
			}
			if err := h.Command(st.ctx, r.m); err != nil {
				return err
			}
			if r.m.Shutdown != nil {
				return nil
			}
		case <-sent:
			// The stream is over (io.EOF: the coordinator ended it). What
			// it sent before, then its status, still arrive on in, and
			// only that tells a Shutdown from a loss.
			sent = nil
		case <-check.C:
			if d := silence(&seen); d > cfg.HeartbeatTimeout {
				return fmt.Errorf("%w: %w: silent for %v", ErrCoordinatorLost, ErrHeartbeatTimeout, d.Round(time.Millisecond))
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
