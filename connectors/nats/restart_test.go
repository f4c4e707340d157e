package nats_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	weirnats "github.com/weirstream/weir/connectors/nats"
	"github.com/weirstream/weir/connectors/nats/natstest"
)

// The server shuts down while an exactly-once job runs and starts again
// on the same port and store, twice: each time the job fails over while
// the server is down (its tasks fail once their connections are lost,
// and the restarts fail until the server is back), then resumes from its
// latest checkpoint and reads records again; the stream written holds
// exactly the batch answer.
func TestServerRestartDuringJob(t *testing.T) {
	s := server(t)
	clicksStreams(t, s.URL())
	in := clicks(12000, 7)
	publish(t, s.URL(), clickSubject, in, nil)
	ctx := testCtx(t)
	var (
		wg       sync.WaitGroup
		restarts [2]sync.Once
		errs     [2]error
		at       [2]atomic.Int64 // the record count when the server went down
		upAt     [2]atomic.Int64 // and when it was back
		failover [2]atomic.Int64 // the job's restarts by then
	)
	defer wg.Wait()
	k := &killer{}
	k.onRecord = func(c int64) {
		for i, from := range []int64{3000, 7000} {
			if c >= from && k.completed(2*(i+1)) && (i == 0 || upAt[0].Load() != 0) {
				restarts[i].Do(func() {
					at[i].Store(c)
					wg.Go(func() {
						n, err := restartAfterFailover(ctx, s, k.job.Load())
						failover[i].Store(int64(n))
						upAt[i].Store(k.seen.Load())
						errs[i] = err
					})
				})
			}
		}
	}
	// While the server is down every restart fails at once (10 ms apart),
	// until the job's metrics (sampled every second) show the failover:
	// a budget that so many restarts cannot exhaust.
	env := checkpointed(2, weir.WithRestartStrategy(weir.FixedDelayRestart(1<<30, 10*time.Millisecond)))
	countingJob(env, s.URL(), k, weirnats.ExactlyOnce)
	j, err := env.Start(ctx)
	require.NoError(t, err)
	k.job.Store(j)
	res, err := j.Wait()
	require.NoError(t, err)
	wg.Wait()
	for i := range errs {
		require.NotZero(t, at[i].Load(), "restart %d happened while the job ran", i)
		require.NoError(t, errs[i], "restart %d", i)
		// Resumed: records were read after the server came back (by the
		// attempt that failed over, since every task had failed).
		require.Greater(t, k.seen.Load(), upAt[i].Load(), "the job read records after restart %d", i)
	}
	require.Greater(t, failover[1].Load(), failover[0].Load(), "the second restart failed the job over again")
	got := readStream(t, s.URL(), "counts")
	slices.Sort(got)
	requireSame(t, runningCounts(in), got)
	t.Logf("server down at records %d and %d, back at %d and %d; job restarts %d, checkpoints %d completed, %d failed",
		at[0].Load(), at[1].Load(), upAt[0].Load(), upAt[1].Load(), res.Restarts, res.Checkpoints.Completed, res.Checkpoints.Failed)
}

// restartAfterFailover shuts s down, waits until j has failed over (its
// restart count went up), and brings s back; it returns j's restart
// count then.
func restartAfterFailover(ctx context.Context, s *natstest.Server, j *weir.Job) (int, error) {
	before := j.Metrics().NumRestarts
	s.Down()
	for {
		n := j.Metrics().NumRestarts
		if n > before {
			return n, s.Up()
		}
		select {
		case <-ctx.Done():
			_ = s.Up()
			return n, fmt.Errorf("the job did not fail over while the server was down (restarts %d): %w", n, context.Cause(ctx))
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Canceling a job while the server is gone for good returns promptly:
// neither the restarts (which cannot connect) nor the sink's waits for
// acknowledgements (here with a ten-minute timeout) hold it up.
func TestCancelWhileServerIsGone(t *testing.T) {
	s := server(t)
	createStream(t, s.URL(), "in", "in")
	createStream(t, s.URL(), "out", "out")
	publish(t, s.URL(), func(int) string { return "in" }, clicks(20000, 7), nil)

	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var gone sync.Once
	k := &killer{}
	k.onRecord = func(n int64) {
		if n >= 3000 && k.completed(1) {
			gone.Do(func() {
				go func() {
					s.Down()
					time.AfterFunc(100*time.Millisecond, cancel)
				}()
			})
		}
	}
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, TolerableFailures: 1000}),
		weir.WithRestartStrategy(weir.FixedDelayRestart(1<<30, 10*time.Millisecond)))
	src := weirnats.Source(env, weirnats.SourceConfig[string]{URL: s.URL(), Stream: "in", Consumer: "cancel",
		Deserializer: weirnats.Values(str), Bounded: true})
	out := weir.Map(src, func(s string) string { k.check(); return s })
	weirnats.Sink(out, weirnats.SinkConfig[string]{URL: s.URL(), Subject: "out", Value: bytesOf, Guarantee: weirnats.ExactlyOnce,
		MsgIDPrefix: "cancel", RequestTimeout: 10 * time.Minute})
	j, err := env.Start(ctx)
	require.NoError(t, err)
	k.job.Store(j)
	done := make(chan error, 1)
	go func() { _, err := j.Wait(); done <- err }()
	select {
	case err := <-done:
		// Canceled, or (when the cancellation met an attempt failing to
		// connect) that attempt's error.
		require.Error(t, err)
		if !errors.Is(err, context.Canceled) {
			require.ErrorContains(t, err, "nats: no servers available for connection")
		}
		t.Logf("returned %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the job did not return within a minute of its cancellation")
	}
}
