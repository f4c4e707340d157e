package failpaths

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/coordinator"
)

// errLookup is what the lookup function returns at record failAt: an
// error that wraps context.Canceled while nobody canceled the job (a
// client library giving up on a call of its own).
var errLookup = fmt.Errorf("lookup: %w", context.Canceled)

const (
	lookupRecords = 10_000
	lookupFailAt  = 7_000
)

// buildLookupJob builds a job whose lookup stage, a task of its own
// behind a rebalance, fails at record lookupFailAt with errLookup.
func buildLookupJob(env *weir.Environment) {
	src := weir.FromGenerator(env, lookupRecords, func(i int64) int64 { return i })
	looked := weir.MapErr(src.Rebalance(), func(v int64) (int64, error) {
		if v == lookupFailAt {
			return 0, errLookup
		}
		return v, nil
	}).Name("lookup")
	weir.Discard(looked)
}

// lookupState returns the state the job's metrics give the lookup
// subtask.
func lookupState(t *testing.T, m weir.JobMetrics) string {
	t.Helper()
	for _, v := range m.Vertices {
		if v.Operators[0] == "lookup" {
			require.Len(t, v.Subtasks, 1)
			return v.Subtasks[0].State
		}
	}
	t.Fatalf("no lookup vertex in %+v", m.Vertices)
	return ""
}

// requireLookupFailure checks that the job failed with the lookup's error
// rather than ending as canceled (or not at all).
func requireLookupFailure(t *testing.T, job *weir.Job, err error) {
	t.Helper()
	require.Error(t, err)
	require.ErrorContains(t, err, "lookup: context canceled")
	m := job.Metrics()
	require.Equal(t, "failed", m.State, "job state")
	require.NotNil(t, m.LatestException)
	require.Contains(t, m.LatestException.Message, "lookup: context canceled")
}

// A user function's error that wraps context.Canceled fails the task and
// the job when the job was not canceled, in one process.
func TestErrorWrappingCanceledFailsTheJob(t *testing.T) {
	for name, opts := range map[string][]weir.Option{
		"no checkpointing": nil,
		"checkpointing": {weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}),
			weir.WithRestartStrategy(coordinator.NoRestart{})},
		"tcp": {weir.WithTCPExchanges(true)},
	} {
		t.Run(name, func(t *testing.T) {
			env := weir.NewEnvironment(append([]weir.Option{weir.WithParallelism(1)}, opts...)...)
			buildLookupJob(env)
			job, err := env.Start(testCtx(t))
			require.NoError(t, err)
			_, err = job.Wait()
			requireLookupFailure(t, job, err)
			require.Equal(t, "failed", lookupState(t, job.Metrics()))
		})
	}
}

// The same across processes: a coordinator and one worker. The worker
// reported the task as canceled and the coordinator waited for the job's
// end forever (the issue measured no result in 90 s).
func TestClusterErrorWrappingCanceledFailsTheJob(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ckpt := weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour, Dir: t.TempDir()})
	opts := []weir.Option{weir.WithParallelism(1), ckpt, weir.WithRestartStrategy(coordinator.NoRestart{})}
	env := weir.NewEnvironment(append(opts, weir.WithCluster(weir.ClusterConfig{Listener: ln, Workers: 1}))...)
	buildLookupJob(env)
	ctx := testCtx(t)
	job, err := env.Start(ctx)
	require.NoError(t, err)

	wenv := weir.NewEnvironment(opts...)
	buildLookupJob(wenv)
	var wg sync.WaitGroup
	var werr error
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	wg.Go(func() { werr = wenv.RunWorker(wctx, weir.WorkerConfig{Coordinator: ln.Addr().String()}) })

	_, err = job.Wait()
	requireLookupFailure(t, job, err)
	require.False(t, errors.Is(context.Cause(ctx), context.DeadlineExceeded), "the job ended only at the test's deadline")
	wg.Wait()
	require.NoError(t, werr, "the coordinator shuts the worker down at the job's end")
}
