package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
)

// Most tests here run inside a testing/synctest bubble, over an in-memory
// network (listen, memDial): time is virtual, it moves only while every
// goroutine of the test waits, so heartbeats are never late, timeouts fire
// exactly when due, and timing can be asserted exactly. The few tests over
// real loopback TCP (listenTCP) say so in their name and assert no timing.

// waitLimit bounds every wait for an event in these tests; reaching it is
// a failure, never the expected path. In a bubble it is virtual time: a
// deadlock detector.
const waitLimit = 10 * time.Second

// Heartbeats in tests. In a bubble any values are exact; over TCP, tests
// that do not test liveness use tcpTimeout so that a loaded machine never
// loses a worker.
const (
	testInterval = 10 * time.Millisecond
	testTimeout  = 400 * time.Millisecond
	tcpTimeout   = time.Hour
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

// memListeners holds the in-memory listeners by address, for memDial.
var (
	memListeners sync.Map // address → *memListener
	memSeq       atomic.Int64
)

// listen returns an in-memory listener, reachable with memDial at its
// Addr().String() until the test ends. Call it inside the test's bubble.
func listen(t *testing.T) net.Listener {
	t.Helper()
	lis := &memListener{Listener: bufconn.Listen(1 << 20), addr: fmt.Sprintf("mem-%d", memSeq.Add(1))}
	memListeners.Store(lis.addr, lis)
	t.Cleanup(func() { memListeners.Delete(lis.addr) })
	return lis
}

type memListener struct {
	*bufconn.Listener
	addr string
}

func (l *memListener) Addr() net.Addr { return memAddr(l.addr) }

type memAddr string

func (memAddr) Network() string  { return "mem" }
func (a memAddr) String() string { return string(a) }

// memDial connects to a listener of listen, or over TCP to any other
// address.
func memDial(ctx context.Context, addr string) (net.Conn, error) {
	if l, ok := memListeners.Load(addr); ok {
		return l.(*memListener).DialContext(ctx)
	}
	if strings.HasPrefix(addr, "mem-") {
		return nil, fmt.Errorf("dial %s: nothing listens there", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// listenTCP returns a loopback TCP listener, for the tests outside bubbles.
func listenTCP(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return lis
}

// startServer serves on an in-memory listener (listen) until the test ends.
func startServer(t *testing.T, cfg ServerConfig) (*Server, string, *events) {
	t.Helper()
	return startServerOn(t, cfg, listen(t))
}

func startServerOn(t *testing.T, cfg ServerConfig, lis net.Listener) (*Server, string, *events) {
	t.Helper()
	ev := newEvents()
	s, addr := startServerWith(t, cfg, lis, ev)
	return s, addr, ev
}

// startServerWith serves on lis, reporting to h, until the test ends.
func startServerWith(t *testing.T, cfg ServerConfig, lis net.Listener, h Handler) (*Server, string) {
	t.Helper()
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = testInterval
		cfg.HeartbeatTimeout = testTimeout
	}
	s, err := NewServer(cfg, h)
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(context.Background(), lis) }()
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		require.NoError(t, recv(t, served))
	})
	return s, lis.Addr().String()
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
		dial:              memDial,
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
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(memDial))
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
