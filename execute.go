package weir

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// runtimeContext is what a node's instantiate function gets for one
// subtask.
type runtimeContext struct {
	n              *node
	subtask        int
	parallelism    int
	maxParallelism int
}

// vertex is a chain of nodes that runs as one task per subtask.
type vertex struct {
	id          string
	nodes       []*node // head first; linear
	parallelism int
	input       *edge   // the head's input edge (nil for a source chain)
	outputs     []*edge // edges leaving the chain
	name        string
}

// jobGraph is the Environment's graph after chaining.
type jobGraph struct {
	vertices []*vertex
	byNode   map[*node]*vertex
}

// Result is what a finished job reports.
type Result struct {
	// Tasks holds every task's metrics of the last attempt.
	Tasks []task.Metrics
	// Duration is the wall time of Execute.
	Duration time.Duration
	// Restarts is the number of times the job restarted after a failure.
	Restarts int
	// Checkpoints are the statistics of the job's checkpoints (nil when
	// checkpointing is off).
	Checkpoints *CheckpointStats
	// LeakedSegments is the number of network segments not returned to the
	// pool at the end: always 0 unless the runtime has a bug.
	LeakedSegments int
}

// RecordsIn sums the records every task read from its input gate.
func (r *Result) RecordsIn() int64 {
	var n int64
	for _, t := range r.Tasks {
		n += t.RecordsIn
	}
	return n
}

func (e *Environment) parallelismOf(n *node) int {
	if n.parallelism > 0 {
		return n.parallelism
	}
	return e.cfg.parallelism
}

// buildGraph validates the graph and chains it into vertices.
func (e *Environment) buildGraph() (*jobGraph, error) {
	if len(e.nodes) == 0 {
		return nil, errors.New("weir: the job has no operators")
	}
	g := &jobGraph{byNode: map[*node]*vertex{}}
	for _, n := range e.nodes {
		if n.isSource && n.input != nil {
			return nil, fmt.Errorf("weir: source %s has an input", n.name)
		}
		if !n.isSource && n.input == nil {
			return nil, fmt.Errorf("weir: operator %s has no input", n.name)
		}
		p := e.parallelismOf(n)
		if p > e.cfg.maxParallelism {
			return nil, fmt.Errorf("weir: operator %s: parallelism %d above max parallelism %d", n.name, p, e.cfg.maxParallelism)
		}
		if in := n.input; in != nil && in.partitioning == network.Forward && e.parallelismOf(in.from) != p {
			in.partitioning = network.Rebalance // Flink does the same
		}
	}
	// Nodes were added in topological order (an operator needs its input).
	for _, n := range e.nodes {
		in := n.input
		if in != nil && e.cfg.chaining && in.partitioning == network.Forward && len(in.from.outputs) == 1 {
			v := g.byNode[in.from]
			v.nodes = append(v.nodes, n)
			g.byNode[n] = v
			continue
		}
		v := &vertex{nodes: []*node{n}, parallelism: e.parallelismOf(n), input: in}
		g.vertices = append(g.vertices, v)
		g.byNode[n] = v
	}
	for _, v := range g.vertices {
		names := make([]string, len(v.nodes))
		for i, n := range v.nodes {
			names[i] = n.name
		}
		v.name = strings.Join(names, " -> ")
		v.id = v.nodes[0].uid
		for _, n := range v.nodes {
			for _, out := range n.outputs {
				if g.byNode[out.to] != v {
					if !n.hasCodec() {
						return nil, errNoCodec(n)
					}
					v.outputs = append(v.outputs, out)
				}
			}
		}
	}
	return g, nil
}

// deployment is one attempt of a job in this process: its tasks and their
// wiring.
type deployment struct {
	tasks []*task.Task
	parts []*network.ResultPartition
	net   *exchanges // nil when every exchange is local
}

// partitionKey names one producer subtask's partition for one edge.
type partitionKey struct {
	e       *edge
	subtask int
}

// deploy builds one attempt of the tasks pl places here: partitions, gates
// and tasks.
func (e *Environment) deploy(g *jobGraph, pool *buffer.GlobalPool, ck *task.CheckpointConfig, restore *restorePoint, pl *placement) (*deployment, error) {
	d := &deployment{}
	if pl.net != nil {
		pl.net.dropFailed() // the previous attempt is over
		d.net = &exchanges{dp: pl.net, pool: pool}
	}
	parts := map[partitionKey]*network.ResultPartition{}
	fail := func(err error) (*deployment, error) {
		for _, p := range d.parts {
			p.Release()
		}
		_ = d.net.teardown(context.Background(), err)
		return nil, err
	}
	// Partitions first: gates read them.
	for _, v := range g.vertices {
		for i := 0; i < v.parallelism; i++ {
			key := state.TaskKey{Vertex: v.id, Subtask: i}
			if !pl.runsHere(key) {
				continue
			}
			for _, out := range v.outputs {
				nsub := g.byNode[out.to].parallelism
				if out.partitioning == network.Forward {
					nsub = 1
				}
				lp, err := pool.NewLocalPool(nsub+1, max(nsub*e.cfg.exclusive+e.cfg.floating, nsub+1))
				if err != nil {
					return fail(fmt.Errorf("weir: deploying %s (%d/%d): %w", v.name, i+1, v.parallelism, err))
				}
				name := fmt.Sprintf("%s (%d/%d) -> %s", v.name, i+1, v.parallelism, out.to.name)
				p, err := network.NewResultPartition(pl.partitionID(g, out, i), name, nsub, lp)
				if err != nil {
					lp.Close()
					return fail(err)
				}
				parts[partitionKey{out, i}] = p
				d.parts = append(d.parts, p)
				if pl.overTCP(g, out) {
					if d.net == nil {
						return fail(fmt.Errorf("weir: %s is read remotely, but there is no data plane", name))
					}
					if err := d.net.serve(key, p); err != nil {
						return fail(err)
					}
				}
			}
		}
	}
	for _, v := range g.vertices {
		for i := 0; i < v.parallelism; i++ {
			if !pl.runsHere(state.TaskKey{Vertex: v.id, Subtask: i}) {
				continue
			}
			t, err := e.deployTask(g, v, i, parts, ck, restore, pl, d.net)
			if err != nil {
				return fail(err)
			}
			d.tasks = append(d.tasks, t)
		}
	}
	return d, nil
}

func (e *Environment) deployTask(g *jobGraph, v *vertex, i int, parts map[partitionKey]*network.ResultPartition, ck *task.CheckpointConfig, restore *restorePoint, pl *placement, x *exchanges) (*task.Task, error) {
	tname := fmt.Sprintf("%s (%d/%d)", v.name, i+1, v.parallelism)
	flushAlways := e.cfg.bufferTimeoutSet && e.cfg.bufferTimeout == 0
	var outputs []*network.ResultPartition
	// Build the chain from its tail: each node's output collector is the
	// next node's input plus writers for edges leaving the chain.
	ops := make([]task.Operator, len(v.nodes))
	var nextIn any
	for k := len(v.nodes) - 1; k >= 0; k-- {
		n := v.nodes[k]
		var outs []any
		if k+1 < len(v.nodes) {
			outs = append(outs, nextIn)
		}
		for _, out := range n.outputs {
			if g.byNode[out.to] == v {
				continue
			}
			p := parts[partitionKey{out, i}]
			w, err := n.newWriter(out, p, i, flushAlways)
			if err != nil {
				return nil, err
			}
			outs = append(outs, w)
			outputs = append(outputs, p)
		}
		var out any
		if len(outs) > 0 {
			out = n.fanout(outs)
		}
		rc := &runtimeContext{n: n, subtask: i, parallelism: v.parallelism, maxParallelism: e.cfg.maxParallelism}
		in, op, err := n.instantiate(rc, out)
		if err != nil {
			return nil, err
		}
		ops[k] = op
		nextIn = in
	}
	cfg := task.Config{
		Key:            state.TaskKey{Vertex: v.id, Subtask: i},
		Name:           tname,
		Parallelism:    v.parallelism,
		Logger:         e.cfg.logger,
		Operators:      ops,
		Outputs:        outputs,
		BufferTimeout:  e.cfg.bufferTimeout,
		FlushAlways:    flushAlways,
		MaxRecordSize:  e.cfg.maxRecordSize,
		MaxParallelism: e.cfg.maxParallelism,
	}
	if v.input == nil {
		src, ok := nextIn.(task.Source)
		if !ok {
			return nil, fmt.Errorf("weir: %s: chain head is not a source", tname)
		}
		cfg.Source = src
	} else {
		chans, err := e.inputChannels(g, v, i, parts, pl, x)
		if err != nil {
			return nil, fmt.Errorf("weir: deploying %s: %w", tname, err)
		}
		cfg.Gate = network.NewInputGate(tname, chans)
		cfg.Input = v.nodes[0].decoder(nextIn)
	}
	if ck != nil {
		cfg.Checkpoint = ck
		if restore != nil {
			cfg.Restore = restoreConfig(restore, v.id)
		}
	}
	return task.New(cfg)
}

// inputChannels returns the channels of subtask i of v: one per producer
// subtask it reads, local or remote as pl says.
func (e *Environment) inputChannels(g *jobGraph, v *vertex, i int, parts map[partitionKey]*network.ResultPartition, pl *placement, x *exchanges) ([]network.InputChannel, error) {
	in := v.input
	prod := g.byNode[in.from]
	remote := pl.overTCP(g, in)
	var rb *network.RemoteBuffers
	var cm *network.ConnectionManager
	if remote {
		if x == nil {
			return nil, errors.New("remote input, but there is no data plane")
		}
		n := prod.parallelism
		if in.partitioning == network.Forward {
			n = 1
		}
		rcfg := network.RemoteBuffersConfig{Exclusive: e.cfg.exclusive, Floating: e.cfg.floating, NoFloating: e.cfg.floating == 0}
		need := n*e.cfg.exclusive + e.cfg.floating
		lp, err := x.pool.NewLocalPool(need, need)
		if err != nil {
			return nil, err
		}
		x.rpools = append(x.rpools, lp)
		if rb, err = network.NewRemoteBuffers(lp, rcfg); err != nil {
			return nil, err
		}
		if cm, err = x.connections(); err != nil {
			return nil, err
		}
	}
	var chans []network.InputChannel
	for j := 0; j < prod.parallelism; j++ {
		sub := i
		if in.partitioning == network.Forward {
			if j != i {
				continue
			}
			sub = 0
		}
		if !remote {
			p := parts[partitionKey{in, j}]
			chans = append(chans, network.NewLocalChannel(fmt.Sprintf("%s[%d]", p.Name(), sub), p.Subpartition(sub)))
			continue
		}
		pk := state.TaskKey{Vertex: prod.id, Subtask: j}
		addr, err := pl.dataAddr(pk)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("%s (%d/%d) -> %s[%d]", prod.name, j+1, prod.parallelism, in.to.name, sub)
		ch, err := network.NewRemoteChannel(name, cm, rb,
			network.RemoteChannelConfig{Addr: addr, Partition: pl.partitionID(g, in, j), Subpartition: sub})
		if err != nil {
			return nil, err
		}
		chans = append(chans, ch)
	}
	return chans, nil
}

// Execute runs the job until its sources are exhausted and every record has
// been processed, the job fails (after its restart strategy gave up), or
// ctx is cancelled. Invalid configuration is reported here.
func (e *Environment) Execute(ctx context.Context) (*Result, error) {
	j, err := e.Start(ctx)
	if err != nil {
		return nil, err
	}
	return j.Wait()
}

// Job is a running job.
type Job struct {
	done   chan struct{}
	res    *Result
	err    error
	cancel context.CancelCauseFunc
	ck     *checkpointing // nil without checkpointing
}

// errStopped cancels a job stopped at a savepoint.
var errStopped = errors.New("weir: job stopped with a savepoint")

// ErrNoCheckpointing is returned by the Job's checkpoint methods when the
// job runs without WithCheckpointing.
var ErrNoCheckpointing = errors.New("weir: checkpointing is not enabled for this job")

// TriggerSavepoint takes a savepoint of the running job: a snapshot of
// every operator's state, with the guarantee of the job's checkpointing
// mode, exported into a new directory under dir, whose path it returns.
// Start a job from it with WithRestoreFrom. A savepoint is not a restore
// point for failover and commits no side effects: transactional sinks
// commit its transactions with the next checkpoint, or when a job starts
// from it. To stop a job at a savepoint, use StopWithSavepoint.
//
// It blocks until the savepoint completed or failed (a
// *coordinator.CheckpointError) or ctx ends. It fails while the job is
// restarting or finishing.
func (j *Job) TriggerSavepoint(ctx context.Context, dir string) (string, error) {
	abs, err := j.savepointDir(dir)
	if err != nil {
		return "", err
	}
	p, err := j.ck.coord.TriggerSavepoint(ctx, abs)
	return p, wrapTriggerErr("savepoint", err)
}

// savepointDir checks that the job checkpoints and makes dir absolute.
func (j *Job) savepointDir(dir string) (string, error) {
	if j.ck == nil {
		return "", ErrNoCheckpointing
	}
	if dir == "" {
		return "", errors.New("weir: savepoint needs a target directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("weir: savepoint: %w", err)
	}
	return abs, nil
}

// StopWithSavepoint takes a savepoint and stops the job at it, for an
// upgrade or a rescale: from the trigger on no checkpoint starts, the
// savepoint commits the transactional sinks' data up to it, and the job is
// then canceled, so a job started from the savepoint (WithRestoreFrom)
// continues exactly where this one stopped: nothing lost, nothing written
// twice. Wait then returns a nil error. If the savepoint fails, the job
// goes on and the error is returned.
func (j *Job) StopWithSavepoint(ctx context.Context, dir string) (string, error) {
	abs, err := j.savepointDir(dir)
	if err != nil {
		return "", err
	}
	p, err := j.ck.coord.StopWithSavepoint(ctx, abs)
	if err != nil {
		return "", wrapTriggerErr("stop with savepoint", err)
	}
	j.cancel(errStopped)
	return p, nil
}

// TriggerCheckpoint takes a checkpoint now (or as soon as fewer than
// MaxConcurrent are in progress) and returns its ID once it completed.
// Errors as for TriggerSavepoint.
func (j *Job) TriggerCheckpoint(ctx context.Context) (barrier.CheckpointID, error) {
	if j.ck == nil {
		return 0, ErrNoCheckpointing
	}
	m, err := j.ck.coord.TriggerCheckpoint(ctx)
	return m.ID, wrapTriggerErr("checkpoint", err)
}

func wrapTriggerErr(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, coordinator.ErrNotAttached), errors.Is(err, coordinator.ErrClosed):
		return fmt.Errorf("weir: %s: the job is not running (restarting or ended): %w", what, err)
	}
	return fmt.Errorf("weir: %s: %w", what, err)
}

// CheckpointStats returns the job's checkpoint statistics so far (the zero
// Stats without checkpointing).
func (j *Job) CheckpointStats() CheckpointStats {
	if j.ck == nil {
		return CheckpointStats{}
	}
	return j.ck.coord.Stats()
}

// Cancel stops the job; Wait then returns context.Canceled.
func (j *Job) Cancel() { j.cancel(context.Canceled) }

// Wait blocks until the job ended and returns its result.
func (j *Job) Wait() (*Result, error) {
	<-j.done
	return j.res, j.err
}

// Start validates the job and starts running it in the background.
func (e *Environment) Start(ctx context.Context) (*Job, error) {
	if err := e.cfg.validate(); err != nil {
		return nil, err
	}
	g, err := e.buildGraph()
	if err != nil {
		return nil, err
	}
	j := &Job{done: make(chan struct{})}
	cleanup := func() {}
	if e.cfg.ckpt != nil {
		if j.ck, cleanup, err = e.newCheckpointing(); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	j.cancel = cancel
	go func() {
		defer close(j.done)
		defer cleanup()
		defer cancel(nil)
		j.res, j.err = e.run(ctx, g, j.ck)
		if j.err != nil && errors.Is(context.Cause(ctx), errStopped) {
			j.err = nil // stopped as asked
		}
	}()
	return j, nil
}

func (e *Environment) run(ctx context.Context, g *jobGraph, ck *checkpointing) (*Result, error) {
	start := time.Now()
	if e.cfg.cluster != nil {
		// Tasks and their network memory live on the workers.
		res := &Result{}
		err := e.runCluster(ctx, g, ck, res)
		res.Duration = time.Since(start)
		return res, err
	}
	pool, err := buffer.NewGlobalPool(buffer.Config{SegmentSize: e.cfg.segmentSize, NumSegments: e.cfg.numSegments})
	if err != nil {
		return nil, fmt.Errorf("weir: %w", err)
	}
	res := &Result{}
	defer func() {
		res.Duration = time.Since(start)
		res.LeakedSegments = pool.InUse()
		if res.LeakedSegments != 0 {
			e.cfg.logger.Error("network segments leaked", zap.Int("segments", res.LeakedSegments))
		}
	}()
	pl, err := e.inProcessPlacement(ctx)
	if err != nil {
		return nil, err
	}
	if pl.net != nil {
		defer pl.net.close() // before the leak check: connections hold segments
	}
	if ck != nil {
		tc := ck.taskConfig()
		deploy := func(_ context.Context, n int, restore *restorePoint) (attempt, error) {
			d, err := e.deploy(g, pool, tc, restore, pl.forAttempt(n))
			if err != nil {
				return nil, err
			}
			return newLocalAttempt(d, e.final), nil
		}
		return res, e.runWithCheckpointing(ctx, ck, deploy, res)
	}
	d, err := e.deploy(g, pool, nil, nil, &pl)
	if err != nil {
		return nil, err
	}
	err = runAttempt(ctx, d)
	res.Tasks = collectMetrics(d)
	if e.final != nil {
		if ferr := e.final.resolve(err == nil, 0); ferr != nil && err == nil {
			err = fmt.Errorf("weir: final commit: %w", ferr)
		}
	}
	return res, err
}

// runAttempt runs every task of d; the first failure cancels the others.
func runAttempt(ctx context.Context, d *deployment) error {
	return runAttemptHook(ctx, d, nil)
}

// runAttemptHook is runAttempt calling ended (if set) whenever a task
// returned, with its error (nil: it finished). The first task failure cancels the others and
// fails the partitions it serves to other processes; the attempt's
// exchanges are torn down before it returns.
func runAttemptHook(ctx context.Context, d *deployment, ended func(k state.TaskKey, err error)) error {
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	if d.net != nil {
		// A channel still dialling or starting stops when the attempt
		// is cancelled.
		ended := make(chan struct{})
		var watch sync.WaitGroup
		watch.Go(func() {
			select {
			case <-tctx.Done():
				d.net.closeConnections()
			case <-ended:
			}
		})
		defer watch.Wait()
		defer close(ended)
	}
	for _, t := range d.tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := t.Run(tctx)
			if ended != nil {
				defer ended(t.Key(), err)
			}
			if err == nil {
				return
			}
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
			cancel(err)
			// A task cancelled because another failed reports that
			// failure to its remote readers.
			d.net.taskFailed(t.Key(), context.Cause(tctx))
		}()
	}
	wg.Wait()
	err := first
	if terr := d.net.teardown(ctx, err); err == nil {
		err = terr
	}
	for _, p := range d.parts {
		// Consumers released what they read; drop anything a failed
		// attempt left queued.
		if err != nil {
			p.Release()
		}
	}
	return err
}

func collectMetrics(d *deployment) []task.Metrics {
	ms := make([]task.Metrics, len(d.tasks))
	for i, t := range d.tasks {
		ms[i] = t.Metrics()
	}
	return ms
}
