package cluster

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

func requireCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok, "not a gRPC status: %v", err)
	require.Equal(t, code, st.Code(), "%v", err)
}

func sampleSnapshot() state.TaskSnapshot {
	return state.TaskSnapshot{Operators: map[string]state.OperatorSubtaskState{
		"window-1": {
			Keyed: &state.KeyedStateHandle{
				StreamHandle: state.StreamHandle{Path: "chk-7/w1-keyed", Size: 1 << 40, Checksum: 0xdeadbeef},
				KeyGroups:    keygroup.Range{Start: 32, End: 64},
				Offsets:      []int64{0, 17, 1<<53 + 1, 1<<62 + 3},
			},
			Operator: &state.OperatorStateHandle{
				StreamHandle: state.StreamHandle{Path: "chk-7/w1-op", Size: 99, Checksum: 1},
				States: map[string]state.OperatorStateMeta{
					"offsets": {Distribution: state.SplitDistribute, Offsets: []int64{0, 8, 16}},
					"union":   {Distribution: state.UnionDistribute, Offsets: []int64{}},
					"empty":   {Distribution: state.UnionDistribute},
				},
			},
		},
		"source": {Operator: &state.OperatorStateHandle{
			StreamHandle: state.StreamHandle{Path: "chk-7/src", Size: 8},
			States:       map[string]state.OperatorStateMeta{},
		}},
		"map": {},
	}}
}

func sampleAck() WorkerMessage {
	return WorkerMessage{Ack: &Ack{
		Attempt:  3,
		Task:     state.TaskKey{Vertex: "window", Subtask: 2},
		ID:       7,
		Snapshot: state.EncodeTaskSnapshot(sampleSnapshot()),
		Metrics: CheckpointMetricsFrom(coordinator.TaskCheckpointMetrics{
			AlignmentDuration: 3 * time.Millisecond, StartDelay: time.Nanosecond,
			SyncDuration: time.Second, AsyncDuration: time.Hour, StateSize: 1<<40 + 99 + 8,
			BytesProcessedDuringAlignment: 12345,
		}),
	}}
}

// TestCodecRoundTripsExactly: every message, with every field set (and a
// few with nil and empty parts), decodes to what was encoded.
func TestCodecRoundTripsExactly(t *testing.T) {
	ms := map[string]WorkerMessage{
		"full ack":   sampleAck(),
		"nil ack":    {Ack: &Ack{Task: state.TaskKey{Vertex: "v"}, ID: 1}},
		"empty ack":  {Ack: &Ack{Task: state.TaskKey{Vertex: "v"}, ID: 1, Snapshot: []byte{}}},
		"no metrics": {TaskStatus: &TaskStatus{Attempt: 1, Task: state.TaskKey{Vertex: "v"}, State: Running}},
	}
	for _, s := range workerSamples() {
		ms[s.name] = s.m
	}
	for name, m := range ms {
		t.Run(name, func(t *testing.T) {
			b, err := jsonCodec{}.Marshal(&m)
			require.NoError(t, err)
			var got WorkerMessage
			require.NoError(t, jsonCodec{}.Unmarshal(b, &got))
			require.Equal(t, m, got) // reflect.DeepEqual: nil and empty differ
		})
	}
	for _, s := range coordinatorSamples() {
		t.Run(s.name, func(t *testing.T) {
			b, err := jsonCodec{}.Marshal(&s.m)
			require.NoError(t, err)
			var got CoordinatorMessage
			require.NoError(t, jsonCodec{}.Unmarshal(b, &got))
			require.Equal(t, s.m, got)
		})
	}
}

// TestAckCarriesTheSnapshot: what the worker encodes into an Ack, the
// coordinator decodes, up to the format's nil-or-empty rules.
func TestAckCarriesTheSnapshot(t *testing.T) {
	got, err := state.DecodeTaskSnapshot(sampleAck().Ack.Snapshot)
	require.NoError(t, err)
	want := sampleSnapshot()
	want.Operators["window-1"].Operator.States["union"] = state.OperatorStateMeta{Distribution: state.UnionDistribute}
	require.Equal(t, want, got)
}

func TestCodecRejectsGarbage(t *testing.T) {
	for _, in := range []string{`{`, `{"Ack":{}} {}`, `{"Bogus":{}}`, `[]`} {
		var m WorkerMessage
		err := jsonCodec{}.Unmarshal([]byte(in), &m)
		require.ErrorIs(t, err, ErrMalformed, in)
	}
}

func TestKindWantsExactlyOneField(t *testing.T) {
	_, err := (&WorkerMessage{}).kind()
	require.ErrorIs(t, err, ErrMalformed)
	_, err = (&WorkerMessage{Heartbeat: &Heartbeat{}, Ack: &Ack{}}).kind()
	require.ErrorContains(t, err, "Heartbeat, Ack")
	k, err := (&CoordinatorMessage{Deploy: &Deploy{}}).kind()
	require.NoError(t, err)
	require.Equal(t, "Deploy", k)
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, ServerConfig{}.Validate())
	require.Error(t, ServerConfig{HeartbeatInterval: time.Second, HeartbeatTimeout: time.Second}.Validate())
	require.Error(t, ServerConfig{QueueSize: -1}.Validate())
	require.Error(t, WorkerConfig{Register: Register{WorkerID: "w"}}.Validate())
	require.Error(t, WorkerConfig{Coordinator: "x:1"}.Validate())
	require.NoError(t, WorkerConfig{Coordinator: "x:1", Register: Register{WorkerID: "w"}}.Validate())
	require.Error(t, WorkerConfig{Coordinator: "x:1", Register: Register{WorkerID: "w"}, RetryTimeout: -1}.Validate())
	_, err := NewServer(ServerConfig{}, nil)
	require.Error(t, err)
	require.Error(t, RunWorker(context.Background(), WorkerConfig{Coordinator: "x:1", Register: Register{WorkerID: "w"}}, nil))
}

// TestRoundTrip registers a worker, sends a Deploy one way and task
// status and an Ack the other, over the in-memory network.
func TestRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { roundTrip(t, listen(t), ServerConfig{}) })
}

// TestRoundTripOverTCP is TestRoundTrip over loopback TCP, outside a
// bubble: with real time, a heartbeat timeout of an hour keeps liveness out
// of it.
func TestRoundTripOverTCP(t *testing.T) {
	roundTrip(t, listenTCP(t), ServerConfig{HeartbeatInterval: testInterval, HeartbeatTimeout: tcpTimeout})
}

func roundTrip(t *testing.T, lis net.Listener, cfg ServerConfig) {
	cfg.Fingerprint = "graph-1"
	s, addr, ev := startServerOn(t, cfg, lis)
	w := newWorker()
	wcfg := workerConfig(addr, "w1")
	wcfg.Register.Fingerprint = "graph-1"
	if cfg.HeartbeatTimeout != 0 {
		wcfg.HeartbeatInterval, wcfg.HeartbeatTimeout = cfg.HeartbeatInterval, cfg.HeartbeatTimeout
	}
	startWorker(t, wcfg, w)

	ws, err := s.WaitWorkers(context.Background(), 1)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	info := recv(t, ev.joined)
	require.Equal(t, ws[0], info)
	require.Equal(t, "w1", info.ID)
	require.Equal(t, "10.0.0.1:7001", info.DataAddr)
	require.Equal(t, 4, info.Slots)
	require.NotEmpty(t, info.Peer)
	sess := recv(t, w.sessions)
	require.Equal(t, "w1", sess.WorkerID())

	deploy := CoordinatorMessage{Deploy: &Deploy{
		Attempt: 1, JobID: "job",
		Tasks:       []Assignment{{Task: state.TaskKey{Vertex: "src", Subtask: 0}, WorkerID: "w1"}},
		DataAddrs:   map[string]string{"w1": "10.0.0.1:7001"},
		Restore:     state.EncodeMetadata(state.Metadata{ID: 7, Tasks: map[state.TaskKey]state.TaskSnapshot{{Vertex: "window", Subtask: 2}: sampleSnapshot()}}),
		RestoreFrom: &StorageLocation{Root: "/ckpt", JobID: "j"},
		Checkpoints: StorageLocation{Root: "/ckpt", JobID: "j"},
	}}
	require.NoError(t, s.Send(context.Background(), "w1", deploy))
	got := recv(t, w.cmds)
	require.Equal(t, deploy, got)
	meta, err := state.DecodeMetadata(got.Deploy.Restore)
	require.NoError(t, err)
	require.Equal(t, barrier.CheckpointID(7), meta.ID)

	status := WorkerMessage{TaskStatus: &TaskStatus{Attempt: 1, Task: state.TaskKey{Vertex: "src"}, State: Failed, Error: "boom"}}
	require.NoError(t, sess.Send(context.Background(), status))
	require.Equal(t, msgEvent{"w1", status}, recv(t, ev.msgs))
	require.NoError(t, sess.Send(context.Background(), sampleAck()))
	require.Equal(t, msgEvent{"w1", sampleAck()}, recv(t, ev.msgs))

	// Malformed sends are refused locally.
	require.ErrorIs(t, sess.Send(context.Background(), WorkerMessage{}), ErrMalformed)
	require.ErrorIs(t, sess.Send(context.Background(), WorkerMessage{Register: &Register{}}), ErrMalformed)
	require.ErrorIs(t, s.Send(context.Background(), "w1", CoordinatorMessage{}), ErrMalformed)
	require.ErrorIs(t, s.Send(context.Background(), "w1", CoordinatorMessage{Registered: &Registered{}}), ErrMalformed)
	require.ErrorIs(t, s.Send(context.Background(), "nobody", CoordinatorMessage{CancelAttempt: &CancelAttempt{}}), ErrNotConnected)
	ev.noneLost(t)
}

// The liveness tests run in bubbles with HeartbeatInterval 1s and
// HeartbeatTimeout 5s: a peer silent for more than the timeout is lost at
// the next check, and checks come every interval.
const (
	beatInterval = time.Second
	beatTimeout  = 5 * time.Second
)

var beatConfig = ServerConfig{HeartbeatInterval: beatInterval, HeartbeatTimeout: beatTimeout}

// TestHeartbeatsKeepStreamAlive plays a worker by hand that answers each
// server heartbeat with one of its own, for ten times the timeout: the
// server sends one every interval, on the dot, and never loses the worker.
func TestHeartbeatsKeepStreamAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, addr, ev := startServer(t, beatConfig)
		cs := rawStream(t, addr)
		rawRegister(t, cs, "w1")
		recv(t, ev.joined)
		last := time.Now()
		for range 10 * beatTimeout / beatInterval {
			var m CoordinatorMessage
			require.NoError(t, cs.RecvMsg(&m))
			require.NotNil(t, m.Heartbeat, "%+v", m)
			require.Equal(t, beatInterval, time.Since(last))
			last = time.Now()
			require.NoError(t, cs.SendMsg(&WorkerMessage{Heartbeat: &Heartbeat{}}))
		}
		ev.noneLost(t)
		require.Len(t, s.Workers(), 1)
		require.NoError(t, s.Send(context.Background(), "w1", CoordinatorMessage{CancelAttempt: &CancelAttempt{Attempt: 9}}))
		for {
			var m CoordinatorMessage
			require.NoError(t, cs.RecvMsg(&m))
			if m.CancelAttempt != nil {
				require.Equal(t, Attempt(9), m.CancelAttempt.Attempt)
				break
			}
		}
	})
}

// TestWorkerLostOnHeartbeatTimeout: a worker that registers and then says
// nothing is lost once silent for more than HeartbeatTimeout, at the next
// check, and its stream ended.
func TestWorkerLostOnHeartbeatTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, addr, ev := startServer(t, beatConfig)
		cs := rawStream(t, addr)
		rawRegister(t, cs, "silent")
		recv(t, ev.joined)
		joined := time.Now()
		lost := recv(t, ev.lost)
		require.Equal(t, beatTimeout+beatInterval, time.Since(joined))
		require.Equal(t, "silent", lost.id)
		require.ErrorIs(t, lost.err, ErrHeartbeatTimeout)
		require.ErrorContains(t, lost.err, "silent for 6s")
		requireCode(t, recvUntilError(t, cs), codes.DeadlineExceeded)
		require.Empty(t, s.Workers())
	})
}

// TestWorkerLostAfterFallingSilent: the timeout counts from the last
// message received, not from the registration.
func TestWorkerLostAfterFallingSilent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, addr, ev := startServer(t, beatConfig)
		cs := rawStream(t, addr)
		rawRegister(t, cs, "w1")
		recv(t, ev.joined)
		joined := time.Now()
		time.Sleep(3*beatInterval + beatInterval/2)
		require.NoError(t, cs.SendMsg(&WorkerMessage{Heartbeat: &Heartbeat{}}))
		last := time.Now()
		lost := recv(t, ev.lost)
		require.ErrorIs(t, lost.err, ErrHeartbeatTimeout)
		// Checks run every interval since the registration: the first
		// after last+timeout finds the worker silent.
		require.Greater(t, time.Since(last), beatTimeout)
		require.LessOrEqual(t, time.Since(last), beatTimeout+beatInterval)
		require.Equal(t, 9*beatInterval, time.Since(joined))
	})
}

// slowHandler takes its time over every Decline.
type slowHandler struct {
	*events
	delay time.Duration
}

func (h slowHandler) Message(workerID string, m WorkerMessage) {
	if m.Decline != nil {
		time.Sleep(h.delay)
	}
	h.events.Message(workerID, m)
}

// TestSlowHandlerIsNotSilence: while the Handler takes longer than the
// timeout over a message, the worker's heartbeats keep arriving, and the worker is
// not lost: a message counts as heard when it arrives, not when the
// Handler gets to it.
func TestSlowHandlerIsNotSilence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = beatTimeout + 2*beatInterval // below waitLimit
		h := slowHandler{events: newEvents(), delay: delay}
		s, addr := startServerWith(t, beatConfig, listen(t), h)
		w := newWorker()
		cfg := workerConfig(addr, "w1")
		cfg.HeartbeatInterval, cfg.HeartbeatTimeout = beatInterval, beatTimeout
		startWorker(t, cfg, w)
		recv(t, h.joined)
		sess := recv(t, w.sessions)
		start := time.Now()
		require.NoError(t, sess.Send(context.Background(), WorkerMessage{Decline: &Decline{ID: 1}}))
		require.Equal(t, barrier.CheckpointID(1), recv(t, h.msgs).m.Decline.ID)
		require.Equal(t, delay, time.Since(start))
		time.Sleep(2 * beatInterval) // checks after the handler returned
		h.noneLost(t)
		require.Len(t, s.Workers(), 1)
	})
}

// TestSilentWorkerLostOverTCP is TestWorkerLostOnHeartbeatTimeout over
// loopback TCP with real time: it waits for the loss without asserting
// when it comes.
func TestSilentWorkerLostOverTCP(t *testing.T) {
	s, addr, ev := startServerOn(t, ServerConfig{HeartbeatInterval: 10 * time.Millisecond, HeartbeatTimeout: 100 * time.Millisecond}, listenTCP(t))
	cs := rawStream(t, addr)
	rawRegister(t, cs, "silent")
	recv(t, ev.joined)
	lost := recv(t, ev.lost)
	require.Equal(t, "silent", lost.id)
	require.ErrorIs(t, lost.err, ErrHeartbeatTimeout)
	requireCode(t, recvUntilError(t, cs), codes.DeadlineExceeded)
	require.Empty(t, s.Workers())
}

func TestFingerprintMismatchRejected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, addr, _ := startServer(t, ServerConfig{Fingerprint: "graph-A"})
		cfg := workerConfig(addr, "w1")
		cfg.Register.Fingerprint = "graph-B"
		err := RunWorker(context.Background(), cfg, newWorker())
		require.ErrorIs(t, err, ErrRejected)
		requireCode(t, err, codes.FailedPrecondition)
		require.ErrorContains(t, err, "graph-A")
		require.ErrorContains(t, err, "graph-B")
		require.Empty(t, s.Workers())
	})
}

func TestTokenChecked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, addr, ev := startServer(t, ServerConfig{Token: "s3cret"})
		for _, tok := range []string{"", "wrong", "s3cret-but-longer"} {
			cfg := workerConfig(addr, "w1")
			cfg.Token = tok
			err := RunWorker(context.Background(), cfg, newWorker())
			require.ErrorIs(t, err, ErrRejected, "token %q", tok)
			requireCode(t, err, codes.Unauthenticated)
		}
		cfg := workerConfig(addr, "w1")
		cfg.Token = "s3cret"
		startWorker(t, cfg, newWorker())
		require.Equal(t, "w1", recv(t, ev.joined).ID)
	})
}

// TestWorkerLostOnCancel: the worker's ctx ends, its stream closes, the
// server reports the loss at once, and the ID may register again.
func TestWorkerLostOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, addr, ev := startServer(t, ServerConfig{HeartbeatInterval: 10 * time.Millisecond, HeartbeatTimeout: time.Minute})
		r := startWorker(t, workerConfig(addr, "w1"), newWorker())
		recv(t, ev.joined)
		r.cancel()
		require.ErrorIs(t, r.result(t), context.Canceled)
		lost := recv(t, ev.lost)
		require.Equal(t, "w1", lost.id)
		require.NotErrorIs(t, lost.err, ErrHeartbeatTimeout) // a minute has not passed
		require.ErrorIs(t, lost.err, ErrDisconnected)
		require.Empty(t, s.Workers())
		require.ErrorIs(t, s.Send(context.Background(), "w1", CoordinatorMessage{CancelAttempt: &CancelAttempt{}}), ErrNotConnected)

		startWorker(t, workerConfig(addr, "w1"), newWorker())
		require.Equal(t, "w1", recv(t, ev.joined).ID)
	})
}

// TestKilledWorkerLostAsDisconnected: a worker whose process is killed
// (the kernel closes its TCP connection: no goodbye, no gRPC status) is
// lost with ErrDisconnected, which says what happened in words, where the
// loss used to read "rpc error: code = Canceled desc = context canceled".
func TestKilledWorkerLostAsDisconnected(t *testing.T) {
	_, addr, ev := startServerOn(t, ServerConfig{HeartbeatInterval: 10 * time.Millisecond, HeartbeatTimeout: time.Minute}, listenTCP(t))
	conns := make(chan net.Conn, 1)
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", a)
			if err == nil {
				conns <- c
			}
			return c, err
		}))
	require.NoError(t, err)
	defer cc.Close()
	cs, err := cc.NewStream(t.Context(), &connectStream, connectMethod, grpc.ForceCodec(rawCodec{}))
	require.NoError(t, err)
	rawRegister(t, cs, "w1")
	recv(t, ev.joined)
	require.NoError(t, (<-conns).Close()) // as the kernel does for a killed process
	lost := recv(t, ev.lost)
	require.Equal(t, "w1", lost.id)
	require.ErrorIs(t, lost.err, ErrDisconnected)
	require.NotContains(t, lost.err.Error(), "context canceled")
}

func TestDuplicateWorkerIDRejectedWhileLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, addr, ev := startServer(t, ServerConfig{})
		first := startWorker(t, workerConfig(addr, "w1"), newWorker())
		recv(t, ev.joined)

		cfg := workerConfig(addr, "w1")
		cfg.RetryTimeout = 200 * time.Millisecond
		err := RunWorker(context.Background(), cfg, newWorker())
		require.ErrorIs(t, err, ErrRejected)
		requireCode(t, err, codes.AlreadyExists)

		// A rejoin waiting for the first incarnation's loss gets in after it.
		second := newWorker()
		startWorker(t, workerConfig(addr, "w1"), second)
		first.cancel()
		require.Equal(t, "w1", recv(t, ev.lost).id)
		require.Equal(t, "w1", recv(t, ev.joined).ID)
		recv(t, second.sessions)
	})
}

// TestMalformedMessagesEndOnlyThatStream sends each kind of bad message on
// its own stream, while a good worker stays connected throughout.
func TestMalformedMessagesEndOnlyThatStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, addr, ev := startServer(t, ServerConfig{})
		good := newWorker()
		startWorker(t, workerConfig(addr, "good"), good)
		recv(t, ev.joined)

		garbage := []byte(`{"Register":`)
		// One bubble for all cases (t.Run is not allowed inside one): each
		// case's name is logged, so a failure says which.
		for _, tc := range []struct {
			name     string
			register bool
			msg      any
			code     codes.Code // InvalidArgument if 0; gRPC itself reports failed unmarshalling as Internal
			want     string
		}{
			{name: "heartbeat before register", msg: &WorkerMessage{Heartbeat: &Heartbeat{}}, want: "first message must be Register"},
			{name: "no field before register", msg: &WorkerMessage{}, want: "no field set"},
			{name: "undecodable first", msg: &garbage, code: codes.Internal, want: "undecodable"},
			{name: "unknown field", msg: &map[string]any{"Bogus": 1}, code: codes.Internal, want: `undecodable *cluster.WorkerMessage: json: unknown field "Bogus"`},
			{name: "no field", register: true, msg: &WorkerMessage{}, want: "no field set"},
			{name: "two fields", register: true, msg: &WorkerMessage{Heartbeat: &Heartbeat{}, Decline: &Decline{}}, want: "2 fields set"},
			{name: "register twice", register: true, msg: &WorkerMessage{Register: &Register{WorkerID: "x"}}, want: "Register on a registered stream"},
			{name: "undecodable", register: true, msg: &garbage, code: codes.Internal, want: "undecodable"},
		} {
			t.Logf("case %q", tc.name)
			cs := rawStream(t, addr)
			if tc.register {
				rawRegister(t, cs, "bad")
				require.Equal(t, "bad", recv(t, ev.joined).ID)
			}
			require.NoError(t, cs.SendMsg(tc.msg))
			err := recvUntilError(t, cs)
			if tc.code == 0 {
				tc.code = codes.InvalidArgument
			}
			requireCode(t, err, tc.code)
			require.ErrorContains(t, err, tc.want)
			if tc.register {
				lost := recv(t, ev.lost)
				require.Equal(t, "bad", lost.id)
				require.ErrorContains(t, lost.err, tc.want)
			}
		}
		require.Equal(t, []string{"good"}, ids(s.Workers()))
		require.NoError(t, s.Send(context.Background(), "good", CoordinatorMessage{CancelAttempt: &CancelAttempt{Attempt: 1}}))
		require.Equal(t, Attempt(1), recv(t, good.cmds).CancelAttempt.Attempt)
		ev.noneLost(t)
	})
}

func ids(ws []WorkerInfo) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.ID)
	}
	return out
}

func TestRegisterTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, addr, _ := startServer(t, ServerConfig{RegisterTimeout: 50 * time.Millisecond})
		start := time.Now()
		cs := rawStream(t, addr)
		requireCode(t, recvUntilError(t, cs), codes.DeadlineExceeded)
		require.Equal(t, 50*time.Millisecond, time.Since(start))
	})
}

// TestCoordinatorSilentIsLost: a coordinator that accepts the
// registration and then never sends again is lost once silent for more
// than HeartbeatTimeout, at the worker's next check.
func TestCoordinatorSilentIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addr := startFake(t, func(ss grpc.ServerStream) error {
			if err := acceptRegister(ss); err != nil {
				return err
			}
			<-ss.Context().Done()
			return nil
		})
		cfg := workerConfig(addr, "w1")
		cfg.HeartbeatInterval, cfg.HeartbeatTimeout = beatInterval, beatTimeout
		start := time.Now()
		err := RunWorker(context.Background(), cfg, newWorker())
		require.Equal(t, beatTimeout+beatInterval, time.Since(start))
		require.ErrorIs(t, err, ErrCoordinatorLost)
		require.ErrorIs(t, err, ErrHeartbeatTimeout)
	})
}

// TestCoordinatorStreamErrorIsLost: the stream fails after registration.
func TestCoordinatorStreamErrorIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addr := startFake(t, func(ss grpc.ServerStream) error {
			if err := acceptRegister(ss); err != nil {
				return err
			}
			return status.Error(codes.Unavailable, "coordinator exploded")
		})
		w := newWorker()
		err := RunWorker(context.Background(), workerConfig(addr, "w1"), w)
		require.ErrorIs(t, err, ErrCoordinatorLost)
		require.ErrorIs(t, err, ErrDisconnected)
		require.ErrorContains(t, err, "coordinator exploded")
		s := recv(t, w.sessions)
		require.ErrorIs(t, s.Send(context.Background(), WorkerMessage{Heartbeat: &Heartbeat{}}), ErrSessionClosed)
	})
}

// TestCoordinatorMalformedIsLost: a message with no field set is a
// protocol violation the worker does not paper over.
func TestCoordinatorMalformedIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addr := startFake(t, func(ss grpc.ServerStream) error {
			if err := acceptRegister(ss); err != nil {
				return err
			}
			if err := ss.SendMsg(&CoordinatorMessage{}); err != nil {
				return err
			}
			<-ss.Context().Done()
			return nil
		})
		err := RunWorker(context.Background(), workerConfig(addr, "w1"), newWorker())
		require.ErrorIs(t, err, ErrCoordinatorLost)
		require.ErrorIs(t, err, ErrMalformed)
	})
}

func TestCommandErrorEndsSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, addr, ev := startServer(t, ServerConfig{})
		boom := errors.New("cannot deploy")
		h := &failingWorker{worker: newWorker(), err: boom}
		r := startWorker(t, workerConfig(addr, "w1"), h)
		recv(t, ev.joined)
		require.NoError(t, s.Send(context.Background(), "w1", CoordinatorMessage{Deploy: &Deploy{Attempt: 1}}))
		require.ErrorIs(t, r.result(t), boom)
		recv(t, ev.lost)
	})
}

type failingWorker struct {
	*worker
	err error
}

func (f *failingWorker) Command(context.Context, CoordinatorMessage) error { return f.err }

func TestShutdownEndsWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, addr, ev := startServer(t, ServerConfig{})
		w := newWorker()
		r := startWorker(t, workerConfig(addr, "w1"), w)
		recv(t, ev.joined)
		require.NoError(t, s.Send(context.Background(), "w1", CoordinatorMessage{Shutdown: &Shutdown{Reason: "job finished"}}))
		require.NoError(t, r.result(t))
		require.Equal(t, "job finished", recv(t, w.cmds).Shutdown.Reason)
		lost := recv(t, ev.lost)
		require.ErrorIs(t, lost.err, ErrShutdown)
		require.ErrorIs(t, s.Send(context.Background(), "w1", CoordinatorMessage{CancelAttempt: &CancelAttempt{}}), ErrNotConnected)
	})
}

// TestCloseShutsDownWorkers: Close with workers connected tells each to
// shut down, reports them lost, and (TestMain's goleak) leaves no
// goroutine behind.
func TestCloseShutsDownWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := newEvents()
		s, err := NewServer(ServerConfig{HeartbeatInterval: testInterval, HeartbeatTimeout: testTimeout}, ev)
		require.NoError(t, err)
		lis := listen(t)
		served := make(chan error, 1)
		go func() { served <- s.Serve(context.Background(), lis) }()

		var rs []*running
		for _, id := range []string{"a", "b", "c"} {
			rs = append(rs, startWorker(t, workerConfig(lis.Addr().String(), id), newWorker()))
		}
		ws, err := s.WaitWorkers(context.Background(), 3)
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b", "c"}, ids(ws))

		require.NoError(t, s.Close())
		require.NoError(t, recv(t, served))
		for _, r := range rs {
			require.NoError(t, r.result(t))
		}
		for range 3 {
			require.ErrorIs(t, recv(t, ev.lost).err, ErrShutdown)
		}
		require.NoError(t, s.Close()) // idempotent
		require.ErrorIs(t, s.Serve(context.Background(), listen(t)), ErrClosed)
		_, err = s.WaitWorkers(context.Background(), 1)
		require.ErrorIs(t, err, ErrClosed)
	})
}

func TestServeEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := NewServer(ServerConfig{}, newEvents())
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- s.Serve(ctx, listen(t)) }()
		wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer wcancel()
		_, err = s.WaitWorkers(wctx, 1)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		cancel()
		require.ErrorIs(t, recv(t, served), context.Canceled)
	})
}

// TestManySendsKeepOrder sends thousands of messages each way through
// small queues, so that senders block, and checks the order.
func TestManySendsKeepOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 3000
		s, addr, ev := startServer(t, ServerConfig{HeartbeatInterval: testInterval, HeartbeatTimeout: testTimeout, QueueSize: 4})
		w := newWorker()
		cfg := workerConfig(addr, "w1")
		cfg.QueueSize = 4
		startWorker(t, cfg, w)
		recv(t, ev.joined)
		sess := recv(t, w.sessions)

		ctx := context.Background()
		sent := make(chan error, 1)
		go func() {
			for i := 1; i <= n; i++ {
				err := sess.Send(ctx, WorkerMessage{Decline: &Decline{ID: barrier.CheckpointID(i)}})
				if err != nil {
					sent <- err
					return
				}
			}
			sent <- nil
		}()
		for i := 1; i <= n; i++ {
			m := CoordinatorMessage{TriggerCheckpoint: &TriggerCheckpoint{Barrier: barrier.Barrier{ID: barrier.CheckpointID(i)}}}
			require.NoError(t, s.Send(ctx, "w1", m))
		}
		for i := 1; i <= n; i++ {
			require.Equal(t, barrier.CheckpointID(i), recv(t, w.cmds).TriggerCheckpoint.Barrier.ID)
			require.Equal(t, barrier.CheckpointID(i), recv(t, ev.msgs).m.Decline.ID)
		}
		require.NoError(t, recv(t, sent))
	})
}

// TestServerSendHonoursContext: a worker that does not read stalls the
// stream; once the queue is full too, Send blocks until its ctx ends.
func TestServerSendHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, addr, ev := startServer(t, ServerConfig{HeartbeatInterval: testInterval, HeartbeatTimeout: time.Minute, QueueSize: 1})
		cs := rawStream(t, addr)
		rawRegister(t, cs, "stuck")
		recv(t, ev.joined)
		big := CoordinatorMessage{Deploy: &Deploy{JobID: string(make([]byte, 64<<10))}}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		var err error
		for err == nil {
			err = s.Send(ctx, "stuck", big)
		}
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, 50*time.Millisecond, time.Since(start), "blocked until the deadline")
	})
}

// TestSessionSendHonoursContext: the same on the worker's side, against a
// coordinator that heartbeats but never reads.
func TestSessionSendHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		addr := startFake(t, func(ss grpc.ServerStream) error {
			if err := acceptRegister(ss); err != nil {
				return err
			}
			tick := time.NewTicker(testInterval)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					if err := ss.SendMsg(&CoordinatorMessage{Heartbeat: &Heartbeat{}}); err != nil {
						return err
					}
				case <-ss.Context().Done():
					return nil
				}
			}
		})
		w := newWorker()
		cfg := workerConfig(addr, "w1")
		cfg.QueueSize = 1
		cfg.HeartbeatTimeout = time.Minute
		startWorker(t, cfg, w)
		sess := recv(t, w.sessions)
		big := WorkerMessage{Decline: &Decline{Reason: string(make([]byte, 64<<10))}}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		var err error
		for err == nil {
			err = sess.Send(ctx, big)
		}
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, 50*time.Millisecond, time.Since(start), "blocked until the deadline")
	})
}

// TestRetryUntilCoordinatorAccepts: the first connections are dropped
// before the gRPC handshake; the worker keeps trying and gets in.
func TestRetryUntilCoordinatorAccepts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lis := &droppingListener{Listener: listen(t)}
		lis.drop.Store(2)
		_, addr, ev := startServerOn(t, ServerConfig{}, lis)
		w := newWorker()
		startWorker(t, workerConfig(addr, "w1"), w)
		require.Equal(t, "w1", recv(t, ev.joined).ID)
		recv(t, w.sessions)
		require.LessOrEqual(t, lis.drop.Load(), int64(0))
	})
}

type droppingListener struct {
	net.Listener
	drop atomic.Int64
}

func (l *droppingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.drop.Add(-1) < 0 {
			return c, err
		}
		_ = c.Close()
	}
}

func TestRetryTimeoutWithoutCoordinator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lis := listen(t)
		addr := lis.Addr().String()
		require.NoError(t, lis.Close()) // nothing listens there now
		cfg := workerConfig(addr, "w1")
		cfg.RetryTimeout = 200 * time.Millisecond
		err := RunWorker(context.Background(), cfg, newWorker())
		require.ErrorContains(t, err, "within 200ms")
		require.NotErrorIs(t, err, ErrRejected)

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		cfg.RetryTimeout = 0
		require.ErrorIs(t, RunWorker(ctx, cfg, newWorker()), context.DeadlineExceeded)
	})
}
