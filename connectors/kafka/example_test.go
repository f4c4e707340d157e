package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/connectors/kafka"
)

// Clicks per user and second of event time, from Kafka to Kafka, exactly
// once. The broker runs in this process (kfake); the source is bounded so
// that the example ends.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "clicks", "clicks-per-second"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	if err := writeClicks(ctx, brokers); err != nil {
		fmt.Println(err)
		return
	}

	env := weir.NewEnvironment(weir.WithParallelism(2),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Second}))
	clicks := kafka.Source(env, kafka.SourceConfig[string]{
		Brokers: brokers, Topics: []string{"clicks"},
		Deserializer: func(r *kgo.Record) (string, error) { return string(r.Key), nil }, // the user
		// Event time: the record timestamps; watermarks per partition.
		Watermarks: weir.BoundedOutOfOrderness[string](500*time.Millisecond, nil).WithIdleness(10 * time.Second),
		Bounded:    true, // stop at the end of what the topic holds now
	})
	perUser := weir.KeyBy(clicks, func(u string) string { return u }, codec.String())
	counts := weir.WindowAggregate(weir.Window(perUser, weir.TumblingWindows(time.Second)),
		weir.AggregateFunction[string, int64, int64]{
			New: func() int64 { return 0 }, Add: func(n int64, _ string) int64 { return n + 1 },
			Result: func(n int64) int64 { return n }}, nil)
	lines := weir.Map(counts, func(w weir.Windowed[string, int64]) string {
		return fmt.Sprintf("%s %d %d", w.Key, w.Window.Start, w.Value)
	})
	kafka.Sink(lines, kafka.SinkConfig[string]{
		Brokers: brokers, Topic: "clicks-per-second",
		Value:     func(s string) ([]byte, error) { return []byte(s), nil },
		Guarantee: kafka.ExactlyOnce, TransactionalIDPrefix: "clicks-per-second",
	})

	if _, err := env.Execute(ctx); err != nil {
		fmt.Println(err)
		return
	}
	out, err := readCommittedValues(ctx, brokers, "clicks-per-second", 4)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, l := range out {
		fmt.Println(l)
	}
	// Output:
	// ann 0 2
	// ann 1000 1
	// bob 0 1
	// bob 2000 2
}

// writeClicks writes six clicks (key: the user) with their event times as
// record timestamps.
func writeClicks(ctx context.Context, brokers []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for _, c := range []struct {
		user string
		ms   int64
	}{{"ann", 100}, {"bob", 300}, {"ann", 900}, {"ann", 1500}, {"bob", 2100}, {"bob", 2200}} {
		recs = append(recs, &kgo.Record{Topic: "clicks", Key: []byte(c.user), Timestamp: time.UnixMilli(c.ms)})
	}
	return cl.ProduceSync(ctx, recs...).FirstErr()
}

// readCommittedValues reads n values of topic with a read-committed
// consumer and returns them sorted.
func readCommittedValues(ctx context.Context, brokers []string, topic string, n int) ([]string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []string
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	}
	slices.Sort(out)
	return out, nil
}
