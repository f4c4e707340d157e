package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connectors/kafka"
)

// BenchmarkKafkaSourceToSink copies b.N records of 100 bytes from one
// topic to another through kfake: with franz-go alone (consume, produce,
// flush: the raw client pipeline), and as a weir job at-least-once and
// exactly-once. The ratio to raw is what counts; kfake is no reference
// for Kafka's own speed.
func BenchmarkKafkaSourceToSink(b *testing.B) {
	value := make([]byte, 100)
	for _, mode := range []string{"raw", "at-least-once", "exactly-once"} {
		b.Run(mode, func(b *testing.B) {
			addrs := broker(b, map[string]int32{"in": 4, "out": 4})
			vals := make([]string, b.N)
			for i := range vals {
				vals[i] = string(value)
			}
			produce(b, addrs, "in", 4, vals, nil)
			ctx := testCtx(b)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			var err error
			if mode == "raw" {
				err = rawCopy(ctx, addrs, b.N)
			} else {
				err = weirCopy(ctx, addrs, mode == "exactly-once")
			}
			if err != nil {
				b.Fatal(err)
			}
			el := time.Since(start).Seconds()
			b.ReportMetric(float64(b.N)/el, "records/s")
			b.ReportMetric(float64(b.N*len(value))/el, "bytes/s")
		})
	}
}

func rawCopy(ctx context.Context, addrs []string, n int) error {
	cons, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("in"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	defer cons.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return err
	}
	defer prod.Close()
	var perr error
	for got := 0; got < n; {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			got++
			prod.Produce(ctx, &kgo.Record{Topic: "out", Value: r.Value}, func(_ *kgo.Record, err error) {
				if err != nil {
					perr = err
				}
			})
		})
	}
	if err := prod.Flush(ctx); err != nil {
		return err
	}
	return perr
}

func weirCopy(ctx context.Context, addrs []string, exactlyOnce bool) error {
	g := kafka.AtLeastOnce
	opts := []weir.Option{weir.WithParallelism(2)}
	if exactlyOnce {
		g = kafka.ExactlyOnce
		opts = append(opts, weir.WithCheckpointing(weir.CheckpointConfig{Interval: 200 * time.Millisecond}))
	}
	env := weir.NewEnvironment(opts...)
	src := kafka.Source(env, kafka.SourceConfig[[]byte]{Brokers: addrs, Topics: []string{"in"}, Bounded: true,
		Deserializer: func(r *kgo.Record) ([]byte, error) { return r.Value, nil }})
	kafka.Sink(src, kafka.SinkConfig[[]byte]{Brokers: addrs, Topic: "out", Guarantee: g, TransactionalIDPrefix: "bench",
		TransactionTimeout: time.Minute, Value: func(v []byte) ([]byte, error) { return v, nil }})
	_, err := env.Execute(ctx)
	if err != nil {
		return fmt.Errorf("job: %w", err)
	}
	return nil
}
