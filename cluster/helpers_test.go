package cluster

import (
	"context"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// waitLimit bounds every wait for an event in these tests; reaching it is
// a failure, never the expected path.
const waitLimit = 10 * time.Second

// Heartbeats in tests: fast, with a timeout generous enough for -race on
// a loaded machine.
const (
	testInterval = 10 * time.Millisecond
	testTimeout  = 400 * time.Millisecond
)

func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("no %T within %v", *new(T), waitLimit)
		panic("unreachable")
	}
}

type lostEvent struct {
	id  string
	err error
}

type msgEvent struct {
	id string
	m  WorkerMessage
}

// events is a Handler that records everything on buffered channels.
type events struct {
	joined chan WorkerInfo
	lost   chan lostEvent
	msgs   chan msgEvent
}

func newEvents() *events {
	return &events{
		joined: make(chan WorkerInfo, 64),
		lost:   make(chan lostEvent, 64),
		msgs:   make(chan msgEvent, 10000),
	}
}

func (e *events) WorkerJoined(w WorkerInfo)                { e.joined <- w }
func (e *events) WorkerLost(id string, err error)          { e.lost <- lostEvent{id, err} }
func (e *events) Message(workerID string, m WorkerMessage) { e.msgs <- msgEvent{workerID, m} }

func (e *events) noneLost(t *testing.T) {
	t.Helper()
	select {
	case l := <-e.lost:
		t.Fatalf("worker %q lost: %v", l.id, l.err)
	default:
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return lis
}

// startServer serves on a loopback port until the test ends.
func startServer(t *testing.T, cfg ServerConfig) (*Server, string, *events) {
	t.Helper()
	return startServerOn(t, cfg, listen(t))
}

func startServerOn(t *testing.T, cfg ServerConfig, lis net.Listener) (*Server, string, *events) {
	t.Helper()
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = testInterval
		cfg.HeartbeatTimeout = testTimeout
	}
	ev := newEvents()
	s, err := NewServer(cfg, ev)
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(context.Background(), lis) }()
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		require.NoError(t, recv(t, served))
	})
	return s, lis.Addr().String(), ev
}

// worker is a WorkerHandler that records what it receives.
type worker struct {
	sessions chan *Session
	cmds     chan CoordinatorMessage
}

func newWorker() *worker {
	return &worker{sessions: make(chan *Session, 1), cmds: make(chan CoordinatorMessage, 10000)}
}

func (w *worker) Connected(s *Session) { w.sessions <- s }

func (w *worker) Command(_ context.Context, m CoordinatorMessage) error {
	w.cmds <- m
	return nil
}

func workerConfig(addr, id string) WorkerConfig {
	return WorkerConfig{
		Coordinator:       addr,
		Register:          Register{WorkerID: id, DataAddr: "10.0.0.1:7001", Slots: 4},
		HeartbeatInterval: testInterval,
		HeartbeatTimeout:  testTimeout,
		DialTimeout:       2 * time.Second,
	}
}

// running is a RunWorker call in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func startWorker(t *testing.T, cfg WorkerConfig, h WorkerHandler) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- RunWorker(ctx, cfg, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(waitLimit):
			t.Errorf("RunWorker did not return")
		}
	})
	return r
}

// result waits for RunWorker to return; it returns the error again to
// later callers (the cleanup).
func (r *running) result(t *testing.T) error {
	t.Helper()
	err := recv(t, r.done)
	r.done <- err
	return err
}

// rawCodec sends *[]byte as is, for payloads the real codec would never
// produce; it decodes like the real codec.
type rawCodec struct{ jsonCodec }

func (c rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(*[]byte); ok {
		return *b, nil
	}
	return json.Marshal(v)
}

// rawStream opens a control stream by hand, to play a misbehaving worker.
func rawStream(t *testing.T, addr string, md ...string) grpc.ClientStream {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	cs, err := cc.NewStream(ctx, &connectStream, connectMethod, grpc.ForceCodec(rawCodec{}))
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		require.NoError(t, cc.Close())
	})
	return cs
}

// rawRegister sends Register on cs and expects Registered.
func rawRegister(t *testing.T, cs grpc.ClientStream, id string) {
	t.Helper()
	require.NoError(t, cs.SendMsg(&WorkerMessage{Register: &Register{WorkerID: id}}))
	var m CoordinatorMessage
	require.NoError(t, cs.RecvMsg(&m))
	require.NotNil(t, m.Registered, "%+v", m)
}

// recvUntilError reads cs until it fails and returns the error.
func recvUntilError(t *testing.T, cs grpc.ClientStream) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		for {
			var m CoordinatorMessage
			if err := cs.RecvMsg(&m); err != nil {
				errc <- err
				return
			}
		}
	}()
	return recv(t, errc)
}

// fakeCoordinator serves the control service with a test's stream
// handler, to play a misbehaving coordinator.
type fakeCoordinator func(grpc.ServerStream) error

func (f fakeCoordinator) connect(ss grpc.ServerStream) error { return f(ss) }

func startFake(t *testing.T, f fakeCoordinator) string {
	t.Helper()
	lis := listen(t)
	gs := grpc.NewServer(grpc.ForceServerCodec(jsonCodec{}))
	gs.RegisterService(serviceDesc(), f)
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	t.Cleanup(func() {
		gs.Stop()
		wg.Wait()
	})
	return lis.Addr().String()
}

// acceptRegister is the start of a fake coordinator's stream handler.
func acceptRegister(ss grpc.ServerStream) error {
	var m WorkerMessage
	if err := ss.RecvMsg(&m); err != nil {
		return err
	}
	return ss.SendMsg(&CoordinatorMessage{Registered: &Registered{WorkerID: m.Register.WorkerID}})
}
