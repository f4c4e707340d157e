package nats_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	weirnats "github.com/weirstream/weir/connectors/nats"
)

// The server shuts down while an exactly-once job runs and starts again
// on the same port and store a little later, twice: the job fails over
// (or, if no request was in flight, carries on once its connections are
// back), retries while the server is gone, resumes from its latest
// checkpoint, and the stream written holds exactly the batch answer.
func TestServerRestartDuringJob(t *testing.T) {
	s := server(t)
	clicksStreams(t, s.URL())
	in := clicks(12000, 7)
	publish(t, s.URL(), clickSubject, in, nil)
	var (
		wg       sync.WaitGroup
		restarts [2]sync.Once
		errs     [2]error
		at       [2]atomic.Int64
	)
	defer wg.Wait()
	k := &killer{}
	k.onRecord = func(c int64) {
		for i, from := range []int64{3000, 7000} {
			if c >= from && k.completed(2*(i+1)) {
				restarts[i].Do(func() {
					at[i].Store(c)
					wg.Go(func() { errs[i] = s.Restart(200 * time.Millisecond) })
				})
			}
		}
	}
	env := checkpointed(2)
	countingJob(env, s.URL(), k, weirnats.ExactlyOnce)
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	k.job.Store(j)
	res, err := j.Wait()
	require.NoError(t, err)
	wg.Wait()
	for i := range errs {
		require.NotZero(t, at[i].Load(), "restart %d happened while the job ran", i)
		require.NoError(t, errs[i], "restart %d", i)
	}
	got := readStream(t, s.URL(), "counts")
	slices.Sort(got)
	requireSame(t, runningCounts(in), got)
	t.Logf("server restarted at records %d and %d; job restarts %d, checkpoints %d completed, %d failed",
		at[0].Load(), at[1].Load(), res.Restarts, res.Checkpoints.Completed, res.Checkpoints.Failed)
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
