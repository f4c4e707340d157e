package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/dashboard"
	"github.com/weirstream/weir/internal/deploy"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/ha"
	"github.com/weirstream/weir/internal/metrics"
	"github.com/weirstream/weir/network"
)

// Job is a running job.
type Job struct {
	done    chan struct{}
	res     *Result
	err     error
	cancel  context.CancelCauseFunc
	ck      *checkpointing // nil without checkpointing
	status  *jobStatus
	sampler *metrics.Sampler
	servers []*dashboard.Server // dashboard, Prometheus
	addrs   httpAddrs
}

// errStopped cancels a job stopped at a savepoint.
var errStopped = errors.New("weir: job stopped with a savepoint")

// Start starts running the job of spec in the background.
func Start(ctx context.Context, spec Spec) (*Job, error) {
	if spec.Logger == nil {
		spec.Logger = zap.NewNop()
	}
	spec.Deploy.Logger = spec.Logger
	j := &Job{done: make(chan struct{})}
	cleanup := func() {}
	var hc *ha.Client
	if spec.Cluster != nil && spec.Cluster.HA != nil {
		// An etcd that does not answer is an error of Start (Execute), not
		// a campaign that waits for it.
		cfg := spec.Cluster.HA.Config
		if cfg.Logger == nil {
			cfg.Logger = spec.Logger.Named("ha")
		}
		var err error
		if hc, err = ha.Dial(ctx, cfg); err != nil {
			return nil, fmt.Errorf("weir: %w", err)
		}
		cleanup = func() { hc.Close() }
	}
	if spec.Checkpoint != nil {
		ckCleanup := func() {}
		var err error
		if j.ck, ckCleanup, err = newCheckpointing(spec.Checkpoint, spec.Graph, spec.Logger, haJobID(hc)); err != nil {
			cleanup()
			return nil, err
		}
		haCleanup := cleanup
		cleanup = func() { ckCleanup(); haCleanup() }
	}
	start := time.Now()
	j.status = newJobStatus(j.ck)
	if err := j.startMetrics(&spec, start); err != nil {
		cleanup()
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	j.cancel = cancel
	mctx, stopMetrics := context.WithCancel(context.Background())
	var mwg sync.WaitGroup
	mwg.Go(func() { j.sampler.Run(mctx) })
	for _, s := range j.servers {
		mwg.Go(func() {
			if err := s.Run(mctx); err != nil {
				spec.Logger.Error("metrics server failed", zap.String("addr", s.Addr()), zap.Error(err))
			}
		})
	}
	go func() {
		defer close(j.done)
		defer cleanup()
		defer cancel(nil)
		j.res = &Result{}
		j.err = run(ctx, &spec, j.ck, j.status, j.res, hc)
		j.res.Duration = time.Since(start)
		if j.err != nil && errors.Is(context.Cause(ctx), errStopped) {
			j.err = nil // stopped as asked
		}
		j.status.ended(j.err, ctx.Err() != nil && (j.err == nil || errors.Is(j.err, context.Canceled)))
		// The sampler takes a last sample of the ended job; the servers
		// shut down with it.
		stopMetrics()
		mwg.Wait()
	}()
	return j, nil
}

func haJobID(hc *ha.Client) string {
	if hc == nil {
		return ""
	}
	return hc.JobID()
}

// Coordinator is the job's checkpoint coordinator (nil without
// checkpointing).
func (j *Job) Coordinator() *coordinator.CheckpointCoordinator {
	if j.ck == nil {
		return nil
	}
	return j.ck.coord
}

// Stop cancels a job that was stopped at a savepoint: Wait then returns a
// nil error.
func (j *Job) Stop() { j.cancel(errStopped) }

// Cancel stops the job; Wait then returns context.Canceled.
func (j *Job) Cancel() { j.cancel(context.Canceled) }

// Wait blocks until the job ended and returns its result.
func (j *Job) Wait() (*Result, error) {
	<-j.done
	return j.res, j.err
}

// run runs the job in this process, or as the coordinator of a cluster.
func run(ctx context.Context, spec *Spec, ck *checkpointing, status *jobStatus, res *Result, hc *ha.Client) (err error) {
	if spec.Cluster != nil {
		// Tasks and their network memory live on the workers.
		return runCluster(ctx, spec, ck, status, res, hc)
	}
	pool, err := deploy.NewNetworkPool(spec.Network)
	if err != nil {
		return err
	}
	defer func() { res.LeakedSegments = deploy.CheckLeaks(pool, spec.Logger) }()
	pl := deploy.Placement{Job: uuid.New()}
	if spec.TCP {
		var cli network.ClientConfig
		if h := spec.Deploy.Harness; h != nil {
			cli.Dial = h.Dial
		}
		dp, err := deploy.StartDataPlane(ctx, "127.0.0.1:0", network.ServerConfig{}, cli, spec.Logger)
		if err != nil {
			return err
		}
		defer func() {
			// Before the leak check: connections hold segments.
			if cerr := dp.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}()
		pl.Net, pl.ViaTCP = dp, true
	}
	if ck == nil {
		d, err := deploy.Deploy(spec.Graph, spec.Deploy, pool, nil, nil, &pl)
		if err != nil {
			return err
		}
		status.attemptStarted(0, false, localSamples(d, 0))
		err = d.Run(ctx, nil)
		res.Tasks = d.Metrics()
		if ferr := spec.Final.Resolve(err == nil, 0); ferr != nil && err == nil {
			err = fmt.Errorf("weir: final commit: %w", ferr)
		}
		return err
	}
	tc := ck.taskConfig()
	start := func(_ context.Context, n int, restore *deploy.RestorePoint) (attempt, error) {
		d, err := deploy.Deploy(spec.Graph, spec.Deploy, pool, tc, restore, pl.ForAttempt(n))
		if err != nil {
			return nil, err
		}
		return newLocalAttempt(n, d, spec.Final), nil
	}
	return newFailover(spec, ck, status, start).run(ctx, res)
}

func newFailover(spec *Spec, ck *checkpointing, status *jobStatus, start startAttempt) *failover {
	restart := spec.Restart
	if restart == nil {
		restart = DefaultRestartStrategy()
	}
	restart.Reset() // a strategy value may have served an earlier job
	return &failover{ck: ck, start: start, restart: restart, log: spec.Logger, status: status, upstream: spec.Graph.Upstream(),
		operators: operatorsOf(spec.Graph)}
}

// operatorsOf lists the operators of each vertex of g.
func operatorsOf(g *graph.JobGraph) map[string][]coordinator.Operator {
	ops := make(map[string][]coordinator.Operator, len(g.Vertices))
	for _, v := range g.Vertices {
		for _, n := range v.Nodes {
			ops[v.ID] = append(ops[v.ID], coordinator.Operator{ID: n.UID, Name: n.Name, Kind: n.Kind})
		}
	}
	return ops
}
