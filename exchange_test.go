package weir

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/network/wire"
	"github.com/weirstream/weir/state"
)

// process is one simulated worker process: its network memory and its
// data plane.
type process struct {
	pool *buffer.GlobalPool
	dp   *dataPlane
}

func startProcesses(t *testing.T, ctx context.Context, e *Environment, n int) []*process {
	t.Helper()
	ps := make([]*process, n)
	for i := range ps {
		pool, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: e.cfg.segmentSize, NumSegments: e.cfg.numSegments})
		require.NoError(t, err)
		dp, err := startDataPlane(ctx, "127.0.0.1:0", network.ServerConfig{}, network.ClientConfig{}, nil)
		require.NoError(t, err)
		ps[i] = &process{pool: pool, dp: dp}
	}
	return ps
}

// placeAll returns each process's placement of g's tasks: task (v, i)
// runs in process where(v, i).
func placeAll(g *jobGraph, ps []*process, job uuid.UUID, where func(v, i int) int) []*placement {
	pls := make([]*placement, len(ps))
	for k, p := range ps {
		pls[k] = &placement{job: job, local: map[state.TaskKey]bool{}, remote: map[state.TaskKey]string{}, net: p.dp}
	}
	for vi, v := range g.vertices {
		for i := 0; i < v.parallelism; i++ {
			key := state.TaskKey{Vertex: v.id, Subtask: i}
			at := where(vi, i)
			for k, pl := range pls {
				if k == at {
					pl.local[key] = true
				} else {
					pl.remote[key] = ps[at].dp.addr
				}
			}
		}
	}
	return pls
}

// runSplit deploys g across ps as pls say and runs every process's attempt
// concurrently, each under its own context; it returns their errors.
func runSplit(t *testing.T, ctx context.Context, e *Environment, g *jobGraph, ps []*process, pls []*placement) []error {
	t.Helper()
	ds := make([]*deployment, len(ps))
	for k, p := range ps {
		d, err := e.deploy(g, p.pool, nil, nil, pls[k])
		require.NoError(t, err)
		ds[k] = d
	}
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for k := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = runAttempt(ctx, ds[k])
		}()
	}
	wg.Wait()
	return errs
}

func closeProcesses(t *testing.T, ps []*process) {
	t.Helper()
	for k, p := range ps {
		p.dp.close()
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
	require.NoError(t, e.cfg.validate())
	g, err := e.buildGraph()
	require.NoError(t, err)
	require.Len(t, g.vertices, 4)

	ps := startProcesses(t, ctx, e, 2)
	pls := placeAll(g, ps, uuid.New(), func(v, i int) int { return (v + i) % 2 })
	errs := runSplit(t, ctx, e, g, ps, pls)
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
	require.NoError(t, e.cfg.validate())
	g, err := e.buildGraph()
	require.NoError(t, err)
	require.Len(t, g.vertices, 2)

	ps := startProcesses(t, ctx, e, 2)
	pls := placeAll(g, ps, uuid.New(), func(v, i int) int { return v }) // sources in 0, sinks in 1
	errs := runSplit(t, ctx, e, g, ps, pls)
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
	build := func() *jobGraph {
		e := NewEnvironment(WithParallelism(3))
		s := FromGenerator(e, 10, func(i int64) int64 { return i })
		Discard(Map(s.Rebalance(), func(v int64) int64 { return v }))
		g, err := e.buildGraph()
		require.NoError(t, err)
		return g
	}
	g1, g2 := build(), build()
	job := uuid.New()
	a0 := (&placement{job: job}).forAttempt(0)
	a1 := (&placement{job: job}).forAttempt(1)
	e1, e2 := g1.vertices[0].outputs[0], g2.vertices[0].outputs[0]
	seen := map[uuid.UUID]string{}
	for sub := 0; sub < 3; sub++ {
		require.Equal(t, a0.partitionID(g1, e1, sub), a0.partitionID(g2, e2, sub))
		for _, a := range []*placement{a0, a1} {
			id := a.partitionID(g1, e1, sub)
			where := fmt.Sprintf("attempt %d subtask %d", a.attempt, sub)
			require.NotContains(t, seen, id, "%s collides with %s", where, seen[id])
			seen[id] = where
		}
	}
	require.NotEqual(t, a0.partitionID(g1, e1, 0), (&placement{job: uuid.New()}).partitionID(g1, e1, 0))
}
