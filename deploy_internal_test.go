package weir

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/internal/deploy"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/network/wire"
	"github.com/weirstream/weir/state"
)

// process is one simulated worker process: its network memory and its
// data plane.
type process struct {
	pool *buffer.GlobalPool
	dp   *deploy.DataPlane
}

func startProcesses(t *testing.T, ctx context.Context, e *Environment, n int) []*process {
	t.Helper()
	ps := make([]*process, n)
	for i := range ps {
		pool, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: e.cfg.segmentSize, NumSegments: e.cfg.numSegments})
		require.NoError(t, err)
		dp, err := deploy.StartDataPlane(ctx, "127.0.0.1:0", network.ServerConfig{}, network.ClientConfig{}, zap.NewNop())
		require.NoError(t, err)
		ps[i] = &process{pool: pool, dp: dp}
	}
	return ps
}

// placeAll returns each process's placement of g's tasks: task (v, i)
// runs in process where(v, i).
func placeAll(g *graph.JobGraph, ps []*process, job uuid.UUID, where func(v, i int) int) []*deploy.Placement {
	pls := make([]*deploy.Placement, len(ps))
	for k, p := range ps {
		pls[k] = &deploy.Placement{Job: job, Local: map[state.TaskKey]bool{}, Remote: map[state.TaskKey]string{}, Net: p.dp}
	}
	for vi, v := range g.Vertices {
		for i := range v.Parallelism {
			key := v.TaskKey(i)
			at := where(vi, i)
			for k, pl := range pls {
				if k == at {
					pl.Local[key] = true
				} else {
					pl.Remote[key] = ps[at].dp.Addr()
				}
			}
		}
	}
	return pls
}

// jobGraph validates e's job and returns its graph and deploy settings.
func jobGraph(t *testing.T, e *Environment) (*graph.JobGraph, deploy.Config) {
	t.Helper()
	spec, err := e.spec()
	require.NoError(t, err)
	return spec.Graph, spec.Deploy
}

// runSplit deploys g across ps as pls say and runs every process's attempt
// concurrently, each under its own context; it returns their errors.
func runSplit(t *testing.T, ctx context.Context, e *Environment, ps []*process, pls []*deploy.Placement) []error {
	t.Helper()
	g, cfg := jobGraph(t, e)
	ds := make([]*deploy.Deployment, len(ps))
	for k, p := range ps {
		d, err := deploy.Deploy(g, cfg, p.pool, nil, nil, pls[k])
		require.NoError(t, err)
		ds[k] = d
	}
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for k := range ps {
		wg.Go(func() { errs[k] = ds[k].Run(ctx, nil) })
	}
	wg.Wait()
	return errs
}

func closeProcesses(t *testing.T, ps []*process) {
	t.Helper()
	for k, p := range ps {
		p.dp.Close()
		require.Zero(t, p.pool.InUse(), "process %d leaked segments", k)
	}
}

// A job whose subtasks are spread over two processes, each vertex split
// between them, exchanges every record over TCP and produces the same
// output as in one process.
func TestSplitDeploymentAcrossProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a guard against hangs, not a timing assertion
	defer cancel()
	const n = 20000
	e := NewEnvironment(WithParallelism(2), WithChaining(false), WithSegmentSize(512))
	s := FromGenerator(e, n, func(i int64) int64 { return i })
	s = Map(s, func(v int64) int64 { return v * 2 }).Rebalance()
	got, _ := Collect(Map(s, func(v int64) int64 { return v + 1 }))
	g, _ := jobGraph(t, e)
	require.Len(t, g.Vertices, 4)

	ps := startProcesses(t, ctx, e, 2)
	pls := placeAll(g, ps, uuid.New(), func(v, i int) int { return (v + i) % 2 })
	errs := runSplit(t, ctx, e, ps, pls)
	closeProcesses(t, ps)
	require.NoError(t, errors.Join(errs...))

	want := make([]int64, n)
	for i := range want {
		want[i] = int64(i)*2 + 1
	}
	vals := got.Values()
	slices.Sort(vals)
	require.Equal(t, want, vals)
}

// A producer that fails in one process fails the consumer reading it in
// another with the producer's error: the consumer does not hang.
func TestRemoteProducerFailureFailsConsumer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a guard against hangs
	defer cancel()
	e := NewEnvironment(WithParallelism(2))
	src := FromGenerator(e, -1, func(i int64) int64 { return i }) // unbounded: only the failure ends it
	failing := Map(src, func(v int64) int64 {
		if v == 3000 {
			panic("producer exploded")
		}
		return v
	}).Name("exploder")
	Discard(failing.Rebalance())
	g, _ := jobGraph(t, e)
	require.Len(t, g.Vertices, 2)

	ps := startProcesses(t, ctx, e, 2)
	pls := placeAll(g, ps, uuid.New(), func(v, i int) int { return v }) // sources in 0, sinks in 1
	errs := runSplit(t, ctx, e, ps, pls)
	closeProcesses(t, ps)

	require.ErrorContains(t, errs[0], "producer exploded")
	require.Error(t, errs[1])
	require.NotErrorIs(t, errs[1], context.DeadlineExceeded)
	var re *network.RemoteError
	require.ErrorAs(t, errs[1], &re, "consumer error: %v", errs[1])
	require.Equal(t, wire.ClassProducerFailed, re.Class)
	t.Logf("consumer error: %v", errs[1])
	require.Contains(t, re.Message, "producer exploded")
}

// Partition IDs depend on the job, the attempt, the edge and the producer
// subtask only: two processes compute the same, and a new attempt gets new
// ones.
func TestPartitionIDsAreDeterministicPerAttempt(t *testing.T) {
	build := func() *graph.JobGraph {
		e := NewEnvironment(WithParallelism(3))
		s := FromGenerator(e, 10, func(i int64) int64 { return i })
		Discard(Map(s.Rebalance(), func(v int64) int64 { return v }))
		g, _ := jobGraph(t, e)
		return g
	}
	g1, g2 := build(), build()
	job := uuid.New()
	a0 := (&deploy.Placement{Job: job}).ForAttempt(0)
	a1 := (&deploy.Placement{Job: job}).ForAttempt(1)
	e1, e2 := g1.Vertices[0].Outputs[0], g2.Vertices[0].Outputs[0]
	seen := map[uuid.UUID]string{}
	for sub := range 3 {
		require.Equal(t, a0.PartitionID(g1, e1, sub), a0.PartitionID(g2, e2, sub))
		for _, a := range []*deploy.Placement{a0, a1} {
			id := a.PartitionID(g1, e1, sub)
			where := fmt.Sprintf("attempt %d subtask %d", a.Attempt, sub)
			require.NotContains(t, seen, id, "%s collides with %s", where, seen[id])
			seen[id] = where
		}
	}
	require.NotEqual(t, a0.PartitionID(g1, e1, 0), (&deploy.Placement{Job: uuid.New()}).PartitionID(g1, e1, 0))
}

// breakableListener is a TCP listener whose Accept fails for good, with
// errBroken, once broken: a listener that died (a closed or revoked
// socket), not one of the temporary errors the server retries.
type breakableListener struct {
	net.Listener
	broken atomic.Bool
}

var errBroken = errors.New("listener broke")

func (l *breakableListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil && l.broken.Load() {
		return nil, errBroken
	}
	return c, err
}

func (l *breakableListener) breakIt() {
	l.broken.Store(true)
	l.Listener.Close()
}

// A data plane whose listener fails for good fails the attempt running
// in its process (consumers elsewhere could not reconnect to it), refuses
// the next deployment, and Close returns the error: the job master fails
// over or ends instead of running on, unreachable.
func TestDataPlaneListenerFailureFailsTheAttempt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a guard against hangs, not a timing assertion
	defer cancel()
	e := NewEnvironment(WithParallelism(2))
	ps := startProcesses(t, ctx, e, 2)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := &breakableListener{Listener: inner}
	dp, err := deploy.ServeDataPlane(ctx, ln, network.ServerConfig{}, network.ClientConfig{}, zap.NewNop())
	require.NoError(t, err)
	ps[0].dp.Close()
	ps[0].dp = dp

	var n atomic.Int64
	src := FromGenerator(e, -1, func(i int64) int64 { return i }) // unbounded: only a failure ends it
	m := Map(src, func(v int64) int64 {
		if n.Add(1) == 2000 {
			ln.breakIt()
		}
		return v
	})
	Discard(m.Rebalance())
	g, _ := jobGraph(t, e)
	pls := placeAll(g, ps, uuid.New(), func(v, i int) int { return v }) // sources in 0, sinks in 1
	errs := runSplit(t, ctx, e, ps, pls)
	require.ErrorIs(t, errs[0], errBroken)
	require.Error(t, errs[1], "the consumer hears of the producer's failure")
	require.NoError(t, ctx.Err(), "ended by the failure, not the guard")

	_, cfg := jobGraph(t, e)
	_, err = deploy.Deploy(g, cfg, ps[0].pool, nil, nil, pls[0])
	require.ErrorIs(t, err, errBroken, "no attempt deploys on a data plane that cannot accept")
	require.ErrorIs(t, ps[0].dp.Close(), errBroken)
	closeProcesses(t, ps)
}
