package deploy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/state"
)

// Placement says which tasks of one attempt of a job this process deploys
// and how each of its consumers reaches its producers' partitions: a
// partition whose producer and every consumer run in this process is read
// through LocalChannels, any other partition is served over TCP (every
// subpartition of it, so that the partition's end can be observed in one
// place) and read through RemoteChannels.
//
// In-process jobs deploy every task (local and remote nil); with TCP
// exchanges forced (viaTCP) they read their own partitions over loopback.
// A cluster worker fills local with its tasks and remote with the data
// address of the worker running every other task.
type Placement struct {
	// Job names the job; with Attempt and the graph it determines every
	// partition ID, so that a consumer in another process computes its
	// producer's partition ID without asking.
	Job uuid.UUID
	// Attempt numbers the deployments of the job (0, 1, …): each attempt
	// has fresh partition IDs, so a consumer never reads a stale attempt's
	// partition.
	Attempt int
	// Local holds the tasks that run here; nil means every task.
	Local map[state.TaskKey]bool
	// Remote maps each task that runs elsewhere to the data address
	// (host:port) of the process running it.
	Remote map[state.TaskKey]string
	// Net serves this process's partitions and reads others'; nil when
	// every exchange is local.
	Net *DataPlane
	// ViaTCP reads partitions of this process over TCP too.
	ViaTCP bool
}

// RunsHere reports whether task k runs in this process.
func (pl *Placement) RunsHere(k state.TaskKey) bool { return pl.Local == nil || pl.Local[k] }

// dataAddr is the data address serving the partitions of task k.
func (pl *Placement) dataAddr(k state.TaskKey) (string, error) {
	if pl.RunsHere(k) {
		if pl.Net == nil {
			return "", errors.New("weir: no data plane to serve local partitions over TCP")
		}
		return pl.Net.addr, nil
	}
	if a := pl.Remote[k]; a != "" {
		return a, nil
	}
	return "", fmt.Errorf("weir: task %s (subtask %d) runs neither here nor at a known address", k.Vertex, k.Subtask)
}

// ForAttempt returns pl for attempt n.
func (pl Placement) ForAttempt(n int) *Placement {
	pl.Attempt = n
	return &pl
}

// PartitionID is the ID of producer subtask sub's partition for edge e in
// this attempt.
func (pl *Placement) PartitionID(g *graph.JobGraph, e *graph.Edge, sub int) uuid.UUID {
	return uuid.NewSHA1(pl.Job, fmt.Appendf(nil, "%d/%s/%d", pl.Attempt, g.EdgeName(e), sub))
}

// overTCP reports whether the partitions of edge e are served over TCP:
// TCP is forced, or a producer or consumer subtask of e runs elsewhere.
// Both sides of the edge compute the same answer.
func (pl *Placement) overTCP(g *graph.JobGraph, e *graph.Edge) bool {
	if pl.ViaTCP {
		return true
	}
	if pl.Local == nil {
		return false
	}
	for _, v := range []*graph.Vertex{g.VertexOf(e.From), g.VertexOf(e.To)} {
		for i := range v.Parallelism {
			if !pl.Local[v.TaskKey(i)] {
				return true
			}
		}
	}
	return false
}

// DataPlane is one process's TCP data plane: a Server for the partitions
// this process registers in its PartitionManager, on one listening
// address, plus the client settings to read other processes' partitions.
// It outlives attempts; each attempt has its own ConnectionManager.
type DataPlane struct {
	parts  *network.PartitionManager
	srv    *network.Server
	addr   string
	client network.ClientConfig
	log    *zap.Logger
	// failed is closed when Serve returned with a fatal error (err): the
	// listener is gone, no consumer can connect any more.
	failed chan struct{}
	served chan struct{} // closed when Serve returned; err is its result
	err    error

	mu struct {
		sync.Mutex
		// failed partitions of a torn-down attempt, kept registered so
		// that a consumer requesting one late hears why instead of
		// retrying "partition not found"; dropped by the next
		// deployment.
		failed []uuid.UUID
	}
}

// StartDataPlane listens on listen (e.g. "127.0.0.1:0") and serves until
// Close or ctx's end.
func StartDataPlane(ctx context.Context, listen string, srvCfg network.ServerConfig, cliCfg network.ClientConfig, log *zap.Logger) (*DataPlane, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("weir: data plane: %w", err)
	}
	dp, err := ServeDataPlane(ctx, ln, srvCfg, cliCfg, log)
	if err != nil {
		ln.Close()
	}
	return dp, err
}

// ServeDataPlane is StartDataPlane on a listener of the caller's; the
// data plane closes it.
func ServeDataPlane(ctx context.Context, ln net.Listener, srvCfg network.ServerConfig, cliCfg network.ClientConfig, log *zap.Logger) (*DataPlane, error) {
	if err := cliCfg.Validate(); err != nil {
		return nil, fmt.Errorf("weir: %w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	pm := network.NewPartitionManager()
	srv, err := network.NewServer(srvCfg, pm, log)
	if err != nil {
		return nil, fmt.Errorf("weir: %w", err)
	}
	dp := &DataPlane{parts: pm, srv: srv, addr: ln.Addr().String(), client: cliCfg, log: log,
		failed: make(chan struct{}), served: make(chan struct{})}
	go func() {
		defer close(dp.served)
		err := srv.Serve(ctx, ln)
		if errors.Is(err, network.ErrServerClosed) {
			return
		}
		dp.err = fmt.Errorf("weir: data plane %s: %w", dp.addr, err)
		log.Error("data plane stopped accepting connections", zap.Error(dp.err))
		close(dp.failed)
	}()
	return dp, nil
}

// Addr is the address the data plane listens on.
func (dp *DataPlane) Addr() string { return dp.addr }

// Failed is closed when the data plane's listener failed for good (Err
// says why): no other process can connect to this one's partitions any
// more, so the running attempt fails and no further one deploys here.
func (dp *DataPlane) Failed() <-chan struct{} { return dp.failed }

// Err is why the data plane failed (nil while it has not).
func (dp *DataPlane) Err() error {
	select {
	case <-dp.failed:
		return dp.err
	default:
		return nil
	}
}

// Close closes the server and its connections and waits for them. It
// returns the listener's fatal error if the data plane failed (nil if it
// served until Close or its context's end).
func (dp *DataPlane) Close() error {
	dp.srv.Close()
	<-dp.served
	dp.dropFailed()
	return dp.Err()
}

// keepFailed keeps the failed partitions ids registered until the next
// deployment.
func (dp *DataPlane) keepFailed(ids []uuid.UUID) {
	dp.mu.Lock()
	dp.mu.failed = append(dp.mu.failed, ids...)
	dp.mu.Unlock()
}

// dropFailed unregisters the partitions of failed attempts.
func (dp *DataPlane) dropFailed() {
	dp.mu.Lock()
	ids := dp.mu.failed
	dp.mu.failed = nil
	dp.mu.Unlock()
	for _, id := range ids {
		dp.parts.Unregister(id)
	}
}

// exchanges is what one deployment added to the data plane: its
// connections, the receive memory of its remote gates and the partitions
// it registered. Torn down once per attempt.
type exchanges struct {
	dp     *DataPlane
	pool   *buffer.GlobalPool            // the process's network memory
	cm     *network.ConnectionManager    // nil until a remote channel needs it
	rpools []*buffer.LocalPool           // RemoteBuffers' segments, one per gate
	served []*network.ResultPartition    // registered in dp.parts
	byTask map[state.TaskKey][]uuid.UUID // producer task → served partitions it writes
}

func (x *exchanges) connections() (*network.ConnectionManager, error) {
	if x.cm == nil {
		cm, err := network.NewConnectionManager(x.dp.client, x.dp.log)
		if err != nil {
			return nil, fmt.Errorf("weir: %w", err)
		}
		x.cm = cm
	}
	return x.cm, nil
}

// serve registers p, written by task k, under its ID.
func (x *exchanges) serve(k state.TaskKey, p *network.ResultPartition) error {
	if err := x.dp.parts.Register(p); err != nil {
		return fmt.Errorf("weir: %w", err)
	}
	x.served = append(x.served, p)
	if x.byTask == nil {
		x.byTask = map[state.TaskKey][]uuid.UUID{}
	}
	x.byTask[k] = append(x.byTask[k], p.ID())
	return nil
}

// taskFailed fails the served partitions task k writes: their remote
// readers get err instead of waiting for data that will never come.
func (x *exchanges) taskFailed(k state.TaskKey, err error) {
	if x == nil {
		return
	}
	for _, id := range x.byTask[k] {
		_ = x.dp.parts.Fail(id, err)
	}
}

// closeConnections closes the attempt's connections: every channel that
// is still reading fails. Safe to call more than once and concurrently.
func (x *exchanges) closeConnections() {
	if x != nil && x.cm != nil {
		x.cm.Close()
	}
}

// teardown releases everything of the attempt once its tasks returned
// (attemptErr is their outcome). After a success it first waits, as long
// as ctx allows, until every served partition was read to its end and its
// readers' connections closed, so that remote consumers get all of it.
func (x *exchanges) teardown(ctx context.Context, attemptErr error) error {
	if x == nil {
		return nil
	}
	x.closeConnections()
	var err error
	if attemptErr == nil {
		err = x.awaitConsumed(ctx)
	}
	failure := attemptErr
	if failure == nil {
		failure = err
	}
	if failure != nil {
		// Readers still attached, or yet to come, hear why instead of
		// waiting.
		ids := make([]uuid.UUID, len(x.served))
		for i, p := range x.served {
			_ = x.dp.parts.Fail(p.ID(), failure)
			ids[i] = p.ID()
		}
		x.dp.keepFailed(ids)
	} else {
		for _, p := range x.served {
			x.dp.parts.Unregister(p.ID())
		}
	}
	for _, lp := range x.rpools {
		lp.Close()
	}
	return err
}

// awaitConsumed waits until every served partition was read to its end
// (or abandoned) and the connections that read it closed, or ctx ends.
func (x *exchanges) awaitConsumed(ctx context.Context) error {
	for _, p := range x.served {
		done, err := x.dp.parts.Done(p.ID())
		if err != nil {
			return fmt.Errorf("weir: %w", err)
		}
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("weir: waiting for partition %s to be consumed: %w", p.Name(), context.Cause(ctx))
		}
	}
	return nil
}
