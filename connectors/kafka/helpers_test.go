package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/weirstream/weir"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// jobTimeout bounds every job of a test: a liveness bug fails the test
// with a message instead of hanging the run.
const jobTimeout = 2 * time.Minute

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeoutCause(t.Context(), jobTimeout,
		fmt.Errorf("test %s: still running after %v: a liveness bug", t.Name(), jobTimeout))
	t.Cleanup(cancel)
	return ctx
}

// broker starts an in-process Kafka broker with the given topics (name ->
// partitions) and returns its address.
func broker(t testing.TB, topics map[string]int32) []string {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	if len(topics) > 0 {
		adm := admin(t, addrs)
		for name, n := range topics {
			_, err := adm.CreateTopic(testCtx(t), n, 1, nil, name)
			require.NoError(t, err)
		}
	}
	return addrs
}

func admin(t testing.TB, addrs []string) *kadm.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// produce writes records to topic, to partition i%partitions for the i-th
// (with the manual partitioner), non-transactionally, and waits for them.
func produce(t testing.TB, addrs []string, topic string, partitions int32, vals []string, ts func(i int) time.Time) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	recs := make([]*kgo.Record, len(vals))
	for i, v := range vals {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32(i) % partitions, Value: []byte(v)}
		if ts != nil {
			recs[i].Timestamp = ts(i)
		}
	}
	require.NoError(t, cl.ProduceSync(testCtx(t), recs...).FirstErr())
}

// readCommitted reads topic from the start with a read-committed consumer
// until it has read everything committed (up to the last stable offsets
// listed first).
func readCommitted(t testing.TB, addrs []string, topic string) []string {
	ctx := testCtx(t)
	adm := admin(t, addrs)
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	require.NoError(t, err)
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	require.NoError(t, err)
	defer cl.Close()
	var out []string
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "reading %s: still waiting for partitions %v", topic, want)
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				out = append(out, string(r.Value))
			}
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

// clicks are the test input: "user,seq" for seq 0..n-1 over users.
func clicks(n, users int) []string {
	vals := make([]string, n)
	for i := range vals {
		vals[i] = fmt.Sprintf("u%d,%d", i%users, i)
	}
	return vals
}

func userOf(s string) string { u, _, _ := strings.Cut(s, ","); return u }

// runningCounts is what a per-user running count of clicks emits: "user:k"
// for k = 1..(the user's clicks), sorted.
func runningCounts(vals []string) []string {
	n := map[string]int{}
	var out []string
	for _, v := range vals {
		u := userOf(v)
		n[u]++
		out = append(out, u+":"+strconv.Itoa(n[u]))
	}
	slices.Sort(out)
	return out
}

// killer fails the records it sees at the given counts (over every
// subtask and attempt), each once; after the first, only once a new
// checkpoint completed since the previous failure, so that restores
// from checkpoints are exercised. It slows the job a little so that
// checkpoints complete while it runs.
type killer struct {
	job atomic.Pointer[weir.Job]
	at  []int64
	// onRecord, if set, sees the count of every record.
	onRecord func(n int64)
	seen     atomic.Int64
	next     atomic.Int64
	ckptAt   atomic.Int64
}

func (k *killer) check() {
	c := k.seen.Add(1)
	if k.onRecord != nil {
		k.onRecord(c)
	}
	if c%10 == 0 {
		time.Sleep(200 * time.Microsecond)
	}
	i := k.next.Load()
	if int(i) >= len(k.at) || c < k.at[i] {
		return
	}
	j := k.job.Load()
	if j == nil {
		return
	}
	done := int64(j.CheckpointStats().Completed)
	if (i == 0 || done > k.ckptAt.Load()) && k.next.CompareAndSwap(i, i+1) {
		k.ckptAt.Store(done)
		panic(fmt.Sprintf("injected failure %d at record %d", i, c))
	}
}

func (k *killer) done() int { return int(k.next.Load()) }
