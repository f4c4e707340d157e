package kafka_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connectors/internal/connectortest"
	"github.com/weirstream/weir/connectors/kafka"
)

// A broker of three leaves the cluster while an exactly-once job runs and
// comes back on the same port a little later (kfake moves the leadership
// of every partition each time, as a broker restart does): the job keeps
// going or restarts from its latest checkpoint, and the read-committed
// output is exactly the batch answer.
func TestBrokerRestartDuringJob(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	adm := admin(t, addrs)
	for name, n := range map[string]int32{"clicks": 4, "counts": 3} {
		_, err := adm.CreateTopic(testCtx(t), n, 1, nil, name)
		require.NoError(t, err)
	}
	in := clicks(20000, 7)
	produce(t, addrs, "clicks", 4, in, nil)

	// The broker to restart: not the first seed, so that the test's own
	// clients still find the cluster; its port, to come back on.
	const node = 1
	_, p, err := net.SplitHostPort(addrs[node])
	require.NoError(t, err)
	port, err := strconv.Atoi(p)
	require.NoError(t, err)

	var (
		wg             sync.WaitGroup
		removed, added sync.Once
		restartErr     [2]error
		fired          [2]atomic.Int64 // the record count at removal and return
	)
	defer wg.Wait()
	k := &killer{}
	k.OnRecord = func(n int64) {
		switch {
		case fired[0].Load() == 0:
			if n >= 5000 && k.Job.Load() != nil && k.Job.Load().CheckpointStats().Completed >= 2 {
				removed.Do(func() {
					fired[0].Store(n)
					wg.Go(func() { restartErr[0] = c.RemoveNode(node) })
				})
			}
		case n >= fired[0].Load()+7000:
			added.Do(func() {
				fired[1].Store(n)
				wg.Go(func() {
					time.Sleep(50 * time.Millisecond) // let clients notice
					_, _, restartErr[1] = c.AddNode(node, port)
				})
			})
		}
	}
	restarts := weir.FixedDelayRestart(100, 50*time.Millisecond)
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, TolerableFailures: 1000}),
		weir.WithRestartStrategy(restarts))
	countingJob(env, addrs, k, kafka.ExactlyOnce, "counts-restart")
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	k.Job.Store(j)
	res, err := j.Wait()
	require.NoError(t, err)
	wg.Wait()
	require.NotZero(t, fired[0].Load(), "the broker was removed while the job ran")
	require.NotZero(t, fired[1].Load(), "the broker came back while the job ran")
	require.NoError(t, restartErr[0], "removing the broker")
	require.NoError(t, restartErr[1], "adding it back")

	got := readCommitted(t, addrs, "counts")
	slices.Sort(got)
	require.Equal(t, runningCounts(in), got)
	t.Logf("broker removed at record %d, back at %d; restarts %d, checkpoints %d completed, %d failed",
		fired[0].Load(), fired[1].Load(), res.Restarts, res.Checkpoints.Completed, res.Checkpoints.Failed)
}

// Canceling a job whose exactly-once sink waits on a Kafka that went away
// returns at once: the sink's flushes and commits give way to the task's
// context instead of waiting out their (here ten-minute) request timeout.
func TestCancelWhileKafkaIsGone(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	defer c.Close()
	addrs := c.ListenAddrs()
	adm := admin(t, addrs)
	for name, n := range map[string]int32{"clicks": 2, "counts": 2} {
		_, err := adm.CreateTopic(testCtx(t), n, 1, nil, name)
		require.NoError(t, err)
	}
	produce(t, addrs, "clicks", 2, clicks(20000, 7), nil)

	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var gone sync.Once
	k := &killer{}
	k.OnRecord = func(n int64) {
		if n >= 3000 && k.Job.Load() != nil && k.Job.Load().CheckpointStats().Completed >= 1 {
			gone.Do(func() {
				c.Close() // the broker is gone for good
				time.AfterFunc(100*time.Millisecond, cancel)
			})
		}
	}
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, TolerableFailures: 1000}))
	src := kafka.Source(env, kafka.SourceConfig[string]{Brokers: addrs, Topics: []string{"clicks"},
		Deserializer: kafka.Values(strings2), Bounded: true})
	out := weir.Map(src, func(s string) string { k.Check(); return s })
	kafka.Sink(out, kafka.SinkConfig[string]{Brokers: addrs, Topic: "counts", Value: bytesOf, Guarantee: kafka.ExactlyOnce,
		TransactionalIDPrefix: "cancel", TransactionTimeout: 12 * time.Minute, RequestTimeout: 10 * time.Minute})
	j, err := env.Start(ctx)
	require.NoError(t, err)
	k.Job.Store(j)
	connectortest.RequireCanceled(t, j)
}
