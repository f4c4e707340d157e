// Command kafka runs an event-time windowed job from Kafka to Kafka,
// exactly once, and verifies its output.
//
// It starts a Kafka broker inside the process (or uses -brokers), writes a
// deterministic stream of click events into topic clicks, counts the clicks
// of every user per second of event time (tumbling windows over the
// Kafka record timestamps, watermarks per partition) and writes the counts
// to topic clicks-per-second through Kafka transactions. -kill N injects N
// task failures, each after a checkpoint completed. Then it reads the
// output with a read-committed consumer and compares it with the same
// counts computed from the input in one pass: it exits non-zero on any
// difference.
//
//	go run ./examples/kafka -kill 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/connectors/kafka"
)

type click struct {
	User string
	TS   int64 // unix ms
}

var clickCodec = codec.Struct2(codec.String(), func(c click) string { return c.User },
	codec.Int64(), func(c click) int64 { return c.TS }, func(u string, ts int64) click { return click{u, ts} })

func main() {
	brokers := flag.String("brokers", "", "Kafka brokers, host:port,... (default: a broker inside this process)")
	n := flag.Int("clicks", 200_000, "click events to write")
	users := flag.Int("users", 50, "distinct users")
	par := flag.Int("p", 2, "parallelism")
	kills := flag.Int("kill", 0, "task failures to inject")
	seed := flag.Uint64("seed", 1, "seed of the click stream")
	flag.Parse()
	if err := run(*brokers, *n, *users, *par, *kills, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "kafka:", err)
		os.Exit(1)
	}
}

func run(brokers string, n, users, par, kills int, seed uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var addrs []string
	if brokers == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			return err
		}
		defer c.Close()
		addrs = c.ListenAddrs()
		fmt.Printf("started a Kafka broker in process at %v\n", addrs)
	} else {
		addrs = strings.Split(brokers, ",")
	}
	suffix := strconv.FormatInt(time.Now().UnixMilli(), 36) // fresh topics on a real cluster
	in, out := "clicks-"+suffix, "clicks-per-second-"+suffix
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for topic, parts := range map[string]int32{in: 4, out: 2} {
		if _, err := adm.CreateTopic(ctx, parts, -1, nil, topic); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating topic %s: %w", topic, err)
		}
	}

	clicks := generate(n, users, seed)
	start := time.Now()
	if err := write(ctx, cl, in, clicks); err != nil {
		return err
	}
	fmt.Printf("wrote %d clicks of %d users to %s (4 partitions) in %v\n", n, users, in, time.Since(start).Round(time.Millisecond))

	env := weir.NewEnvironment(weir.WithParallelism(par), weir.WithBufferTimeout(5*time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 50 * time.Millisecond, TolerableFailures: 100}))
	k := newKiller(kills, int64(n/(kills+2)))
	src := kafka.Source(env, kafka.SourceConfig[click]{
		Brokers: addrs, Topics: []string{in}, Bounded: true,
		Deserializer: func(r *kgo.Record) (click, error) {
			return click{User: string(r.Key), TS: r.Timestamp.UnixMilli()}, nil
		},
		Watermarks: weir.BoundedOutOfOrderness[click](500*time.Millisecond, nil).WithIdleness(5 * time.Second),
	}).WithCodec(clickCodec).UID("clicks")
	faulty := weir.Map(src, func(c click) click { k.check(); return c }).WithCodec(clickCodec)
	windows := weir.Window(weir.KeyBy(faulty, func(c click) string { return c.User }, codec.String()), weir.TumblingWindows(time.Second))
	perWindow := weir.WindowAggregate(windows, weir.AggregateFunction[click, int64, int64]{
		Codec: codec.Int64(), New: func() int64 { return 0 }, Add: func(n int64, _ click) int64 { return n + 1 },
		Merge: func(a, b int64) int64 { return a + b }, Result: func(n int64) int64 { return n },
	}, codec.Int64())
	kafka.Sink(weir.Map(perWindow, func(w weir.Windowed[string, int64]) string {
		return fmt.Sprintf("%s,%d,%d", w.Key, w.Window.Start, w.Value)
	}), kafka.SinkConfig[string]{
		Brokers: addrs, Topic: out, Guarantee: kafka.ExactlyOnce,
		TransactionalIDPrefix: out, TransactionTimeout: 2 * time.Minute,
		Key:   func(s string) ([]byte, error) { u, _, _ := strings.Cut(s, ","); return []byte(u), nil },
		Value: func(s string) ([]byte, error) { return []byte(s), nil },
	}).UID("counts")
	job, err := env.Start(ctx)
	if err != nil {
		return err
	}
	k.job.Store(job)
	res, err := job.Wait()
	if err != nil {
		return err
	}
	fmt.Printf("job finished in %v: %s (%s), %s\n", res.Duration.Round(time.Millisecond), count(res.Restarts, "restart"),
		count(int64(kills)-k.left.Load(), "injected failure"), count(res.Checkpoints.Completed, "checkpoint"))

	got, err := readCommitted(ctx, addrs, out)
	if err != nil {
		return err
	}
	want := batch(clicks)
	fmt.Printf("read %d window counts from %s (read committed); the batch answer has %d\n", len(got), out, len(want))
	if err := compare(want, got); err != nil {
		return err
	}
	fmt.Println("verified: the output equals the batch answer exactly (nothing lost, nothing duplicated)")
	return nil
}

// generate makes n clicks, 2 ms of event time apart, each up to 200 ms
// out of order, over users.
func generate(n, users int, seed uint64) []click {
	r := rand.New(rand.NewPCG(seed, 7))
	base := int64(1_700_000_000_000)
	cs := make([]click, n)
	for i := range cs {
		cs[i] = click{User: fmt.Sprintf("user%02d", r.IntN(users)), TS: base + int64(i)*2 - r.Int64N(200)}
	}
	return cs
}

func write(ctx context.Context, cl *kgo.Client, topic string, clicks []click) error {
	recs := make([]*kgo.Record, len(clicks))
	for i, c := range clicks {
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(c.User), Value: []byte(c.User), Timestamp: time.UnixMilli(c.TS)}
	}
	return cl.ProduceSync(ctx, recs...).FirstErr()
}

// batch counts the clicks per user and second in one pass.
func batch(clicks []click) map[string]int64 {
	m := map[string]int64{}
	for _, c := range clicks {
		m[fmt.Sprintf("%s,%d", c.User, c.TS-c.TS%1000)]++
	}
	return m
}

func readCommitted(ctx context.Context, addrs []string, topic string) (map[string]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	got := map[string]int64{}
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				v := string(r.Value)
				i := strings.LastIndexByte(v, ',')
				k, _ := strconv.ParseInt(v[i+1:], 10, 64)
				if _, dup := got[v[:i]]; dup {
					got[v[:i]] = -1 // a window twice: never equal to the batch
				} else {
					got[v[:i]] = k
				}
			}
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
	return got, nil
}

func compare(want, got map[string]int64) error {
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("window %s missing (want %d)", k, w))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("window %s: got %d, want %d (-1: written twice)", k, g, w))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("window %s not in the batch answer", k))
		}
	}
	if len(diffs) > 0 {
		if len(diffs) > 10 {
			diffs = append(diffs[:10], fmt.Sprintf("... %d more", len(diffs)-10))
		}
		return fmt.Errorf("the output differs from the batch answer:\n  %s", strings.Join(diffs, "\n  "))
	}
	return nil
}

// killer fails the job left times: at the first record past every
// every-th, once a checkpoint completed since the last failure. While it
// waits for that checkpoint it slows the job down a while, so that the
// failures asked for happen.
type killer struct {
	job    atomic.Pointer[weir.Job]
	seen   atomic.Int64
	next   atomic.Int64 // record count of the next failure
	left   atomic.Int64
	every  int64
	last   atomic.Int64 // completed checkpoints at the last failure
	waited atomic.Int64 // records slowed down for the next failure
}

func newKiller(kills int, every int64) *killer {
	k := &killer{every: every}
	k.left.Store(int64(kills))
	k.next.Store(every)
	return k
}

func (k *killer) check() {
	c := k.seen.Add(1)
	at := k.next.Load()
	if k.left.Load() <= 0 || c < at {
		return
	}
	j := k.job.Load()
	if j == nil {
		return
	}
	done := int64(j.CheckpointStats().Completed)
	if done <= k.last.Load() {
		// Let a checkpoint complete; none may come once a source
		// subtask finished its input: then give this failure up.
		if k.waited.Add(1) < 1000 {
			time.Sleep(100 * time.Microsecond)
		} else if k.next.CompareAndSwap(at, c+k.every) {
			k.waited.Store(0)
		}
		return
	}
	if k.next.CompareAndSwap(at, c+k.every) {
		k.waited.Store(0)
		k.left.Add(-1)
		k.last.Store(done)
		panic(fmt.Sprintf("injected failure at record %d", c))
	}
}

// count is n and word, in the plural unless n is 1 ("1 restart", "2
// restarts").
func count[N int | int64](n N, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
