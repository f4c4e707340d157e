package weir

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/state"
)

// placement says which tasks of one attempt of a job this process deploys
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
type placement struct {
	// job names the job; with attempt and the graph it determines every
	// partition ID, so that a consumer in another process computes its
	// producer's partition ID without asking.
	job uuid.UUID
	// attempt numbers the deployments of the job (0, 1, …): each attempt
	// has fresh partition IDs, so a consumer never reads a stale attempt's
	// partition.
	attempt int
	// local holds the tasks that run here; nil means every task.
	local map[state.TaskKey]bool
	// remote maps each task that runs elsewhere to the data address
	// (host:port) of the process running it.
	remote map[state.TaskKey]string
	// net serves this process's partitions and reads others'; nil when
	// every exchange is local.
	net *dataPlane
	// viaTCP reads partitions of this process over TCP too.
	viaTCP bool
}

func (pl *placement) runsHere(k state.TaskKey) bool { return pl.local == nil || pl.local[k] }

// dataAddr is the data address serving the partitions of task k.
func (pl *placement) dataAddr(k state.TaskKey) (string, error) {
	if pl.runsHere(k) {
		if pl.net == nil {
			return "", errors.New("weir: no data plane to serve local partitions over TCP")
		}
		return pl.net.addr, nil
	}
	if a := pl.remote[k]; a != "" {
		return a, nil
	}
	return "", fmt.Errorf("weir: task %s (subtask %d) runs neither here nor at a known address", k.Vertex, k.Subtask)
}

// forAttempt returns pl for attempt n.
func (pl placement) forAttempt(n int) *placement {
	pl.attempt = n
	return &pl
}

// edgeName is an edge's stable identity: its producer and consumer
// vertices (a vertex has exactly one input edge, and vertex IDs derive
// from the operators' UIDs).
func edgeName(g *jobGraph, e *edge) (from, to string) {
	return g.byNode[e.from].id, g.byNode[e.to].id
}

// partitionID is the ID of producer subtask sub's partition for edge e in
// this attempt.
func (pl *placement) partitionID(g *jobGraph, e *edge, sub int) uuid.UUID {
	from, to := edgeName(g, e)
	return uuid.NewSHA1(pl.job, fmt.Appendf(nil, "%d/%q/%q/%d", pl.attempt, from, to, sub))
}

// overTCP reports whether the partitions of edge e are served over TCP:
// TCP is forced, or a producer or consumer subtask of e runs elsewhere.
// Both sides of the edge compute the same answer.
func (pl *placement) overTCP(g *jobGraph, e *edge) bool {
	if pl.viaTCP {
		return true
	}
	if pl.local == nil {
		return false
	}
	for _, v := range []*vertex{g.byNode[e.from], g.byNode[e.to]} {
		for i := 0; i < v.parallelism; i++ {
			if !pl.local[state.TaskKey{Vertex: v.id, Subtask: i}] {
				return true
			}
		}
	}
	return false
}

// dataPlane is one process's TCP data plane: a Server for the partitions
// this process registers in its PartitionManager, on one listening
// address, plus the client settings to read other processes' partitions.
// It outlives attempts; each attempt has its own ConnectionManager.
type dataPlane struct {
	parts  *network.PartitionManager
	srv    *network.Server
	addr   string
	client network.ClientConfig
	log    *zap.Logger
	served chan error // Serve's result

	mu struct {
		sync.Mutex
		// failed partitions of a torn-down attempt, kept registered so
		// that a consumer requesting one late hears why instead of
		// retrying "partition not found"; dropped by the next
		// deployment.
		failed []uuid.UUID
	}
}

// startDataPlane listens on listen (e.g. "127.0.0.1:0") and serves until
// close or ctx's end.
func startDataPlane(ctx context.Context, listen string, srvCfg network.ServerConfig, cliCfg network.ClientConfig, log *zap.Logger) (*dataPlane, error) {
	if err := cliCfg.Validate(); err != nil {
		return nil, fmt.Errorf("weir: %w", err)
	}
	pm := network.NewPartitionManager()
	srv, err := network.NewServer(srvCfg, pm, log)
	if err != nil {
		return nil, fmt.Errorf("weir: %w", err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("weir: data plane: %w", err)
	}
	dp := &dataPlane{parts: pm, srv: srv, addr: ln.Addr().String(), client: cliCfg, log: log, served: make(chan error, 1)}
	go func() { dp.served <- srv.Serve(ctx, ln) }()
	return dp, nil
}

// close closes the server and its connections and waits for them.
func (dp *dataPlane) close() {
	dp.srv.Close()
	<-dp.served
	dp.dropFailed()
}

// keepFailed keeps the failed partitions ids registered until the next
// deployment.
func (dp *dataPlane) keepFailed(ids []uuid.UUID) {
	dp.mu.Lock()
	dp.mu.failed = append(dp.mu.failed, ids...)
	dp.mu.Unlock()
}

// dropFailed unregisters the partitions of failed attempts.
func (dp *dataPlane) dropFailed() {
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
	dp     *dataPlane
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

// inProcessPlacement places every task of the job here. With TCP
// exchanges it starts the job's data plane on loopback; the caller closes
// it.
func (e *Environment) inProcessPlacement(ctx context.Context) (placement, error) {
	pl := placement{job: uuid.New()}
	if !e.cfg.tcp {
		return pl, nil
	}
	dp, err := startDataPlane(ctx, "127.0.0.1:0", network.ServerConfig{}, network.ClientConfig{}, e.cfg.logger)
	if err != nil {
		return pl, err
	}
	pl.net, pl.viaTCP = dp, true
	return pl, nil
}
