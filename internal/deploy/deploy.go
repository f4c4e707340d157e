package deploy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/weirstream/weir/buffer"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/network/debloat"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// Config holds the settings every deployed task shares.
type Config struct {
	// Exclusive and Floating are the buffers of each remote input channel
	// and each remote gate (they also size local partitions' pools).
	Exclusive, Floating int
	// BufferTimeout bounds how long a partially filled buffer waits;
	// FlushAlways flushes after every record instead.
	BufferTimeout time.Duration
	FlushAlways   bool
	// MaxRecordSize bounds one incoming record (0: network default).
	MaxRecordSize int
	Logger        *zap.Logger
	// NewKeyedBackend creates the keyed state backend of a keyed operator
	// (required: the root package decides the default).
	NewKeyedBackend func(maxParallelism, parallelism, index int) (state.KeyedBackend, error)
	// Harness, if set, probes every operator subtask (test harnesses
	// only; see Harness).
	Harness Harness
	// Debloat turns buffer debloating on (nil: off); MaxSize defaults to
	// the segment size.
	Debloat *debloat.Config
	// ForceUnaligned: unaligned checkpoints take pointwise (forward) and
	// broadcast exchanges unaligned too; without it their barriers stay in
	// band, as in Flink.
	ForceUnaligned bool
}

// NewNetworkPool creates a process's network buffer pool.
func NewNetworkPool(c buffer.Config) (*buffer.GlobalPool, error) {
	pool, err := buffer.NewGlobalPool(c)
	if err != nil {
		return nil, fmt.Errorf("weir: %w", err)
	}
	return pool, nil
}

// CheckLeaks reports the segments of pool not returned (always 0 unless
// the runtime has a bug), logging them as an error.
func CheckLeaks(pool *buffer.GlobalPool, log *zap.Logger) int {
	n := pool.InUse()
	if n != 0 {
		log.Error("network segments leaked", zap.Int("segments", n))
	}
	return n
}

// Deployment is one attempt of a job in this process: its tasks and their
// wiring.
type Deployment struct {
	tasks []*task.Task
	parts []*network.ResultPartition
	net   *exchanges // nil when every exchange is local
}

// Tasks are the deployment's tasks.
func (d *Deployment) Tasks() []*task.Task { return d.tasks }

// partitionKey names one producer subtask's partition for one edge.
type partitionKey struct {
	e       *graph.Edge
	subtask int
}

// builder deploys one attempt.
type builder struct {
	g       *graph.JobGraph
	cfg     *Config
	pool    *buffer.GlobalPool
	ck      *task.CheckpointConfig
	restore *RestorePoint
	pl      *Placement
	d       *Deployment
	parts   map[partitionKey]*network.ResultPartition
}

// Deploy builds the tasks pl places here, with their partitions and
// gates; it starts nothing. ck is nil without checkpointing; restore is
// nil for a fresh start.
func Deploy(g *graph.JobGraph, cfg Config, pool *buffer.GlobalPool, ck *task.CheckpointConfig, restore *RestorePoint, pl *Placement) (*Deployment, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.NewKeyedBackend == nil {
		return nil, errors.New("weir: deploy: no keyed state backend factory (Config.NewKeyedBackend)")
	}
	if restore != nil {
		if err := restore.Check(g); err != nil {
			return nil, err
		}
	}
	b := &builder{g: g, cfg: &cfg, pool: pool, ck: ck, restore: restore, pl: pl,
		d: &Deployment{}, parts: map[partitionKey]*network.ResultPartition{}}
	if pl.Net != nil {
		if err := pl.Net.Err(); err != nil {
			return nil, err
		}
		pl.Net.dropFailed() // the previous attempt is over
		b.d.net = &exchanges{dp: pl.Net, pool: pool}
	}
	if err := b.build(); err != nil {
		for _, p := range b.d.parts {
			p.Release()
		}
		_ = b.d.net.teardown(context.Background(), err)
		return nil, err
	}
	return b.d, nil
}

func (b *builder) build() error {
	// Partitions first: gates read them.
	for _, v := range b.g.Vertices {
		for i := range v.Parallelism {
			if b.pl.RunsHere(v.TaskKey(i)) {
				if err := b.partitions(v, i); err != nil {
					return err
				}
			}
		}
	}
	for _, v := range b.g.Vertices {
		for i := range v.Parallelism {
			if !b.pl.RunsHere(v.TaskKey(i)) {
				continue
			}
			t, err := b.task(v, i)
			if err != nil {
				return err
			}
			b.d.tasks = append(b.d.tasks, t)
		}
	}
	return nil
}

// partitions creates subtask i of v's output partitions.
func (b *builder) partitions(v *graph.Vertex, i int) error {
	for _, out := range v.Outputs {
		nsub := b.g.Subpartitions(out)
		lp, err := b.pool.NewLocalPool(nsub+1, max(nsub*b.cfg.Exclusive+b.cfg.Floating, nsub+1))
		if err != nil {
			return fmt.Errorf("weir: deploying %s: %w", v.TaskName(i), err)
		}
		lp.SetOverdraft(network.DefaultOverdraftBuffers)
		name := fmt.Sprintf("%s -> %s", v.TaskName(i), consumerName(out))
		p, err := network.NewResultPartition(b.pl.PartitionID(b.g, out, i), name, nsub, lp)
		if err != nil {
			lp.Close()
			return err
		}
		p.SetAlignedBarriers(!b.cfg.ForceUnaligned && (out.Partitioning == network.Forward || out.Partitioning == network.Broadcast))
		b.parts[partitionKey{out, i}] = p
		b.d.parts = append(b.d.parts, p)
		if b.pl.overTCP(b.g, out) {
			if b.d.net == nil {
				return fmt.Errorf("weir: %s is read remotely, but there is no data plane", name)
			}
			if err := b.d.net.serve(v.TaskKey(i), p); err != nil {
				return err
			}
		}
	}
	return nil
}

// task builds subtask i of v.
func (b *builder) task(v *graph.Vertex, i int) (*task.Task, error) {
	tname := v.TaskName(i)
	var outputs []*network.ResultPartition
	// Build the chain from its tail: each node's output collector is the
	// next node's input plus writers for edges leaving the chain.
	ops := make([]task.Operator, len(v.Nodes))
	running := new(task.CurrentOperator)
	var nextIn any
	var headProbe Probe // the chain head's, under a harness
	var headSub *graph.Subtask
	for k := len(v.Nodes) - 1; k >= 0; k-- {
		n := v.Nodes[k]
		var outs []any
		if k+1 < len(v.Nodes) {
			outs = append(outs, nextIn)
		}
		sides := make([][]any, len(n.Sides))
		for _, out := range n.Outputs {
			if b.g.VertexOf(out.To) == v {
				continue
			}
			p := b.parts[partitionKey{out, i}]
			newWriter := n.NewWriter
			if out.Side > 0 {
				newWriter = n.Sides[out.Side-1].NewWriter
			}
			w, err := newWriter(out, p, i, b.cfg.FlushAlways)
			if err != nil {
				return nil, err
			}
			if out.Side > 0 {
				sides[out.Side-1] = append(sides[out.Side-1], w)
			} else {
				outs = append(outs, w)
			}
			outputs = append(outputs, p)
		}
		var out any
		if len(outs) > 0 {
			out = n.Fanout(outs)
		}
		sub := &graph.Subtask{Node: n, Index: i, Parallelism: v.Parallelism, MaxParallelism: b.g.MaxParallelism, Running: running}
		headSub = sub
		if len(sides) > 0 {
			sub.Sides = make([]any, len(sides))
			for s, ws := range sides {
				if len(ws) > 0 {
					sub.Sides[s] = n.Sides[s].Fanout(ws)
				}
			}
		}
		p := b.probeFor(v, n, i)
		if p != nil && n.Source {
			out = n.ProbeOutput(out, p.Record)
		}
		in, op, err := n.Instantiate(sub, out)
		if err != nil {
			return nil, err
		}
		if p != nil {
			if !n.Source {
				in = probeInputs(n, in, p.Record)
			}
			op = probeOperator(op, p)
			if k == 0 {
				headProbe = p
			}
		}
		ops[k] = op
		nextIn = in
	}
	cfg := task.Config{
		Key:             v.TaskKey(i),
		Name:            tname,
		Parallelism:     v.Parallelism,
		Logger:          b.cfg.Logger,
		Operators:       ops,
		Current:         running,
		Outputs:         outputs,
		BufferTimeout:   b.cfg.BufferTimeout,
		FlushAlways:     b.cfg.FlushAlways,
		MaxRecordSize:   b.cfg.MaxRecordSize,
		MaxParallelism:  b.g.MaxParallelism,
		NewKeyedBackend: b.cfg.NewKeyedBackend,
	}
	if v.IsSource() {
		src, ok := nextIn.(task.Source)
		if !ok {
			return nil, fmt.Errorf("weir: %s: chain head is not a source", tname)
		}
		if headProbe != nil {
			src = &heldSource{Source: src, p: headProbe}
		}
		cfg.Source = src
	} else {
		chans, inputs, err := b.inputChannels(v, headSub, nextIn)
		if err != nil {
			return nil, fmt.Errorf("weir: deploying %s: %w", tname, err)
		}
		cfg.Gate = network.NewInputGate(tname, chans)
		cfg.Inputs = inputs
		if d := b.cfg.Debloat; d != nil {
			dc := *d
			if dc.MaxSize == 0 {
				dc.MaxSize = b.pool.SegmentSize()
			}
			cfg.Debloat = &dc
		}
	}
	if b.ck != nil {
		cfg.Checkpoint = b.ck
		if b.restore != nil {
			cfg.Restore = b.restore.ForVertex(v)
		}
	}
	return task.New(cfg)
}

// consumerName names the consumer of edge e in partition and channel
// names: with its input when it has several input edges.
func consumerName(e *graph.Edge) string {
	if e.To.MultiInput() {
		return fmt.Sprintf("%s (input %d)", e.To.Name, e.Input+1)
	}
	return e.To.Name
}

// headInput returns the collector of input k of a chain head whose
// Instantiate returned in.
func headInput(n *graph.Node, in any, k int) any {
	if ins, ok := in.([]any); ok && n.NumInputs > 1 {
		return ins[k]
	}
	return in
}

// probeInputs wraps the input collectors of n (in, as Instantiate
// returned it) in probes.
func probeInputs(n *graph.Node, in any, probe func() error) any {
	ins, ok := in.([]any)
	if !ok || n.NumInputs <= 1 {
		return n.Inputs[0].ProbeInput(in, probe)
	}
	probed := make([]any, len(ins))
	for k := range ins {
		for _, e := range n.Inputs {
			if e.Input == k {
				probed[k] = e.ProbeInput(ins[k], probe)
				break
			}
		}
	}
	return probed
}

// inputChannels returns the channels of subtask i of v, over all the
// head's input edges in order (one channel per producer subtask an edge
// reads, local or remote as the placement says), and the task's inputs:
// each edge's share of the channels and its decoder into in, the head's
// input collectors.
func (b *builder) inputChannels(v *graph.Vertex, sub *graph.Subtask, in any) ([]network.InputChannel, []task.Input, error) {
	i := sub.Index
	var chans []network.InputChannel
	var inputs []task.Input
	var rb *network.RemoteBuffers // the gate's receive buffers, shared by its remote channels
	for _, e := range v.Inputs {
		prod := b.g.VertexOf(e.From)
		producers, subs := b.g.Producers(e, i)
		head := v.Nodes[0]
		inputs = append(inputs, task.Input{Index: e.Input, Channels: len(producers),
			Processor: e.Decoder(headInput(head, in, e.Input), sub)})
		if !b.pl.overTCP(b.g, e) {
			for k, j := range producers {
				p := b.parts[partitionKey{e, j}]
				chans = append(chans, network.NewLocalChannel(fmt.Sprintf("%s[%d]", p.Name(), subs[k]), p.Subpartition(subs[k])))
			}
			continue
		}
		x := b.d.net
		if x == nil {
			return nil, nil, errors.New("remote input, but there is no data plane")
		}
		if rb == nil {
			var err error
			if rb, err = b.remoteBuffers(v, i); err != nil {
				return nil, nil, err
			}
		}
		cm, err := x.connections()
		if err != nil {
			return nil, nil, err
		}
		for k, j := range producers {
			addr, err := b.pl.dataAddr(prod.TaskKey(j))
			if err != nil {
				return nil, nil, err
			}
			name := fmt.Sprintf("%s -> %s[%d]", prod.TaskName(j), consumerName(e), subs[k])
			ch, err := network.NewRemoteChannel(name, cm, rb,
				network.RemoteChannelConfig{Addr: addr, Partition: b.pl.PartitionID(b.g, e, j), Subpartition: subs[k]})
			if err != nil {
				return nil, nil, err
			}
			chans = append(chans, ch)
		}
	}
	return chans, inputs, nil
}

// remoteBuffers makes the receive buffers of subtask i of v's gate: the
// exclusive buffers of each of its remote channels and the floating
// buffers they share.
func (b *builder) remoteBuffers(v *graph.Vertex, i int) (*network.RemoteBuffers, error) {
	remote := 0
	for _, e := range v.Inputs {
		if b.pl.overTCP(b.g, e) {
			ps, _ := b.g.Producers(e, i)
			remote += len(ps)
		}
	}
	x := b.d.net
	rcfg := network.RemoteBuffersConfig{Exclusive: b.cfg.Exclusive, Floating: b.cfg.Floating, NoFloating: b.cfg.Floating == 0}
	need := remote*b.cfg.Exclusive + b.cfg.Floating
	lp, err := x.pool.NewLocalPool(need, need)
	if err != nil {
		return nil, err
	}
	x.rpools = append(x.rpools, lp)
	return network.NewRemoteBuffers(lp, rcfg)
}

// Run runs every task of d; the first failure cancels the others and
// fails the partitions they serve to other processes. ended, if set, is
// called whenever a task returned, with its error (nil: it finished).
// The attempt's exchanges are torn down before Run returns.
func (d *Deployment) Run(ctx context.Context, ended func(k state.TaskKey, err error)) error {
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	if d.net != nil {
		// A channel still dialling or starting stops when the attempt
		// is canceled.
		done := make(chan struct{})
		var watch sync.WaitGroup
		watch.Go(func() {
			select {
			case <-d.net.dp.Failed():
				// Consumers elsewhere cannot reach this process's
				// partitions: the attempt fails over.
				mu.Lock()
				if first == nil {
					first = d.net.dp.Err()
				}
				mu.Unlock()
				cancel(d.net.dp.Err())
				d.net.closeConnections()
			case <-tctx.Done():
				d.net.closeConnections()
			case <-done:
			}
		})
		defer watch.Wait()
		defer close(done)
	}
	for _, t := range d.tasks {
		wg.Go(func() {
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
			// A task canceled because another failed reports that
			// failure to its remote readers.
			d.net.taskFailed(t.Key(), context.Cause(tctx))
		})
	}
	wg.Wait()
	err := first
	if err != nil && ctx.Err() != nil {
		// Canceled from outside: what the tasks ran into while stopping
		// (a connection closed under a dialling channel) is a consequence.
		err = context.Cause(ctx)
	}
	if terr := d.net.teardown(ctx, err); err == nil {
		err = terr
	}
	if err != nil {
		// Consumers released what they read; drop anything a failed
		// attempt left queued.
		for _, p := range d.parts {
			p.Release()
		}
	}
	return err
}

// Metrics returns every task's metrics; call it after Run returned.
func (d *Deployment) Metrics() []task.Metrics {
	ms := make([]task.Metrics, len(d.tasks))
	for i, t := range d.tasks {
		ms[i] = t.Metrics()
	}
	return ms
}
