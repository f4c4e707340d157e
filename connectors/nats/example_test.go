package nats_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	weirnats "github.com/weirstream/weir/connectors/nats"
	"github.com/weirstream/weir/connectors/nats/natstest"
)

// Clicks per user from one JetStream stream to another, exactly once,
// against a NATS server started inside the process.
func Example() {
	dir, _ := os.MkdirTemp("", "weir-nats-example")
	defer os.RemoveAll(dir)
	srv, err := natstest.Start(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	url := srv.URL()
	ctx := context.Background()
	nc, _ := natsgo.Connect(url)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	// clicks.0 .. clicks.3: four partitions, each a split of the source.
	js.CreateStream(ctx, jetstream.StreamConfig{Name: "clicks", Subjects: []string{"clicks.*"}})
	js.CreateStream(ctx, jetstream.StreamConfig{Name: "counts", Subjects: []string{"counts"}, Duplicates: 5 * time.Minute})
	for i := range 100 {
		js.Publish(ctx, "clicks."+strconv.Itoa(i%4), []byte("u"+strconv.Itoa(i%3)))
	}

	env := weir.NewEnvironment(weir.WithParallelism(2),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Second}))
	clicks := weirnats.Source(env, weirnats.SourceConfig[string]{
		URL: url, Stream: "clicks", Consumer: "clicks-per-user", // consumers clicks-per-user-<subtask>
		Subjects:     weirnats.PartitionSubjects("clicks.%d", 4),
		Deserializer: weirnats.Values(func(b []byte) (string, error) { return string(b), nil }),
		Watermarks:   weir.BoundedOutOfOrderness[string](500*time.Millisecond, nil).WithIdleness(10 * time.Second),
		Bounded:      true, // stop at the last message the stream holds now
	})
	perUser := weir.KeyBy(weir.Map(clicks, func(u string) count { return count{u, 1} }).WithCodec(countCodec),
		func(c count) string { return c.User }, codec.String())
	counts := weir.Map(weir.Reduce(perUser, func(a, b count) count { a.N += b.N; return a }),
		func(c count) string { return fmt.Sprintf("%s %d", c.User, c.N) })
	weirnats.Sink(counts, weirnats.SinkConfig[string]{
		URL: url, Subject: "counts",
		Value:     func(s string) ([]byte, error) { return []byte(s), nil },
		Guarantee: weirnats.ExactlyOnce, MsgIDPrefix: "clicks-per-user", // Nats-Msg-Id prefix-subtask-checkpoint-index
	})
	if _, err := env.Execute(ctx); err != nil {
		fmt.Println(err)
		return
	}

	cons, _ := js.OrderedConsumer(ctx, "counts", jetstream.OrderedConsumerConfig{})
	batch, _ := cons.Fetch(100, jetstream.FetchMaxWait(5*time.Second))
	final := map[string]string{}
	for m := range batch.Messages() {
		final[string(m.Data()[:2])] = string(m.Data())
	}
	var out []string
	for _, v := range final {
		out = append(out, v)
	}
	slices.Sort(out)
	fmt.Println(out)
	// Output: [u0 34 u1 33 u2 33]
}
