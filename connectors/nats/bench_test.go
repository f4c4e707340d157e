package nats_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weirstream/weir"
	weirnats "github.com/weirstream/weir/connectors/nats"
	"github.com/weirstream/weir/internal/cputime"
)

// BenchmarkNATSSink publishes b.N records of 100 bytes to a JetStream
// stream of an in-process server: with nats.go's async publish alone (the
// client at its fastest, 4096 unacknowledged at most, as the sink), and
// through a weir job (generated records -> Sink) at-least-once and
// exactly-once (checkpoints every 200 ms). The ratio to raw is what
// counts (records/s, and cpu-ns/record, which a loaded machine disturbs
// less); raw-msg-id is the client alone publishing with a Nats-Msg-Id
// each, as exactly-once does, to show what the stream's de-duplication
// costs the server.
func BenchmarkNATSSink(b *testing.B) {
	value := make([]byte, 100)
	for _, mode := range []string{"raw", "raw-msg-id", "at-least-once", "exactly-once"} {
		b.Run(mode, func(b *testing.B) {
			s := server(b)
			createStreamWith(b, s.URL(), jetstream.StreamConfig{Name: "out", Subjects: []string{"out"}, Duplicates: time.Minute})
			ctx := testCtx(b)
			b.ReportAllocs()
			b.ResetTimer()
			start, cpu0 := time.Now(), cputime.Process()
			var err error
			if mode == "raw" || mode == "raw-msg-id" {
				err = rawPublish(ctx, s.URL(), value, b.N, mode == "raw-msg-id")
			} else {
				err = sinkPublish(ctx, s.URL(), value, b.N, mode == "exactly-once")
			}
			if err != nil {
				b.Fatal(err)
			}
			el := time.Since(start).Seconds()
			cpu := cputime.Process() - cpu0
			b.StopTimer()
			b.ReportMetric(float64(b.N)/el, "records/s")
			// The process's CPU time per record (the server's included: it
			// runs in the process), steadier than records/s on a shared
			// machine.
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/record")
			if got := streamMsgs(b, s.URL()); got != uint64(b.N) {
				b.Fatalf("the stream holds %d messages, want %d", got, b.N)
			}
		})
	}
}

func rawPublish(ctx context.Context, url string, value []byte, n int, ids bool) error {
	nc, err := natsgo.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	var perr error
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *natsgo.Msg, err error) { perr = err }))
	if err != nil {
		return err
	}
	for i := range n {
		m := &natsgo.Msg{Subject: "out", Data: value}
		if ids {
			m.Header = natsgo.Header{jetstream.MsgIDHeader: []string{"raw-0-1-" + strconv.Itoa(i)}}
		}
		// As the sink does: wait while the window is full (a loaded
		// machine stalls it), cancellably.
		_, err := js.PublishMsgAsync(m, jetstream.WithStallWait(50*time.Millisecond))
		for errors.Is(err, jetstream.ErrTooManyStalledMsgs) && ctx.Err() == nil {
			_, err = js.PublishMsgAsync(m, jetstream.WithStallWait(50*time.Millisecond))
		}
		if err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	return perr
}

func sinkPublish(ctx context.Context, url string, value []byte, n int, exactlyOnce bool) error {
	g := weirnats.AtLeastOnce
	opts := []weir.Option{weir.WithParallelism(1)}
	if exactlyOnce {
		g = weirnats.ExactlyOnce
		opts = append(opts, weir.WithCheckpointing(weir.CheckpointConfig{Interval: 200 * time.Millisecond}))
	}
	env := weir.NewEnvironment(opts...)
	src := weir.FromGenerator(env, int64(n), func(int64) []byte { return value })
	weirnats.Sink(src, weirnats.SinkConfig[[]byte]{URL: url, Subject: "out", Guarantee: g, MsgIDPrefix: "bench",
		Value: func(v []byte) ([]byte, error) { return v, nil }})
	if _, err := env.Execute(ctx); err != nil {
		return fmt.Errorf("job: %w", err)
	}
	return nil
}

func streamMsgs(b *testing.B, url string) uint64 {
	s, err := jsClient(b, url).Stream(testCtx(b), "out")
	if err != nil {
		b.Fatal(err)
	}
	return s.CachedInfo().State.Msgs
}
