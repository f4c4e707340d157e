package kafka_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/weirstream/weir/connectors/internal/connectortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var testCtx = connectortest.Context

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

type killer = connectortest.Killer
