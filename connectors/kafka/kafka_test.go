package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/connectors/kafka"
)

// count is a user's running count of clicks.
type count struct {
	User string
	N    int64
}

var countCodec = codec.Struct2(codec.String(), func(c count) string { return c.User },
	codec.Int64(), func(c count) int64 { return c.N }, func(u string, n int64) count { return count{u, n} })

func strings2(b []byte) (string, error) { return string(b), nil }
func bytesOf(s string) ([]byte, error)  { return []byte(s), nil }

// countingJob builds clicks (Kafka) -> running count per user (keyed
// state) -> counts (Kafka), with failures from k.
func countingJob(env *weir.Environment, addrs []string, k *killer, g kafka.Guarantee, prefix string) {
	src := kafka.Source(env, kafka.SourceConfig[string]{Brokers: addrs, Topics: []string{"clicks"},
		Deserializer: kafka.Values(strings2), Bounded: true}).UID("clicks")
	faulty := weir.Map(src, func(s string) count { k.Check(); return count{userOf(s), 1} }).WithCodec(countCodec)
	counts := weir.Reduce(weir.KeyBy(faulty, func(c count) string { return c.User }, codec.String()),
		func(a, b count) count { a.N += b.N; return a }).UID("counts")
	out := weir.Map(counts, func(c count) string { return c.User + ":" + strconv.FormatInt(c.N, 10) })
	kafka.Sink(out, kafka.SinkConfig[string]{Brokers: addrs, Topic: "counts", Value: bytesOf,
		Key: func(s string) ([]byte, error) { return []byte(userOf(s)), nil }, Guarantee: g,
		TransactionalIDPrefix: prefix, TransactionTimeout: 2 * time.Minute}).UID("sink")
}

// Kafka -> keyed state -> Kafka, exactly once, with task kills: the
// read-committed output is exactly the batch answer, at every parallelism
// and over both exchanges.
func TestExactlyOnceEndToEnd(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		for p := 1; p <= 3; p++ {
			t.Run(fmt.Sprintf("p%d/tcp=%v", p, tcp), func(t *testing.T) {
				addrs := broker(t, map[string]int32{"clicks": 4, "counts": 3})
				in := clicks(6000, 7)
				produce(t, addrs, "clicks", 4, in, nil)
				env := weir.NewEnvironment(weir.WithParallelism(p), weir.WithTCPExchanges(tcp), weir.WithBufferTimeout(time.Millisecond),
					weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, TolerableFailures: 100}))
				k := &killer{At: []int64{1000, 3000, 5000}}
				countingJob(env, addrs, k, kafka.ExactlyOnce, "counts-eo")
				j, err := env.Start(testCtx(t))
				require.NoError(t, err)
				k.Job.Store(j)
				res, err := j.Wait()
				require.NoError(t, err)
				require.GreaterOrEqual(t, res.Restarts, 1)
				got := readCommitted(t, addrs, "counts")
				slices.Sort(got)
				require.Equal(t, runningCounts(in), got)
				t.Logf("restarts %d, kills %d, checkpoints %d", res.Restarts, k.Done(), res.Checkpoints.Completed)
			})
		}
	}
}

// At least once with kills: every result is there, some maybe twice.
func TestAtLeastOnceLosesNothing(t *testing.T) {
	addrs := broker(t, map[string]int32{"clicks": 4, "counts": 3})
	in := clicks(4000, 5)
	produce(t, addrs, "clicks", 4, in, nil)
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, Mode: weir.AtLeastOnce, TolerableFailures: 100}))
	k := &killer{At: []int64{1500, 3000}}
	countingJob(env, addrs, k, kafka.AtLeastOnce, "")
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	k.Job.Store(j)
	res, err := j.Wait()
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.Restarts, 1)
	got := readCommitted(t, addrs, "counts")
	seen := map[string]bool{}
	for _, v := range got {
		seen[v] = true
	}
	for _, v := range runningCounts(in) {
		require.True(t, seen[v], "%s lost", v)
	}
}

// Per-partition watermarks: partition 1 lags partition 0 by ten seconds of
// event time, partition 2 is empty. The lagging partition's records are
// not late, and windows fire while the job runs (the empty partition turns
// idle). The idleness timeout is generous: a partition whose records the
// client has not fetched by then would turn idle too, and its records
// would then be late, by the definition of idleness.
func TestPerPartitionWatermarksWithAnIdlePartition(t *testing.T) {
	addrs := broker(t, map[string]int32{"events": 3})
	base := time.UnixMilli(1_700_000_000_000)
	var vals []string
	for i := range 400 {
		vals = append(vals, fmt.Sprintf("ahead,%d", i), fmt.Sprintf("behind,%d", i))
	}
	// Record i goes to partition i%2: "ahead" to 0, "behind" to 1.
	produce(t, addrs, "events", 2, vals, func(i int) time.Time {
		ms := time.Duration(i/2) * 10 * time.Millisecond
		if i%2 == 0 {
			return base.Add(10*time.Second + ms)
		}
		return base.Add(ms)
	})
	env := weir.NewEnvironment(weir.WithParallelism(1), weir.WithBufferTimeout(time.Millisecond),
		weir.WithAutoWatermarkInterval(5*time.Millisecond))
	src := kafka.Source(env, kafka.SourceConfig[string]{Brokers: addrs, Topics: []string{"events"}, Deserializer: kafka.Values(strings2),
		Watermarks: weir.BoundedOutOfOrderness[string](0, nil).WithIdleness(time.Second)})
	ws := weir.Window(weir.KeyBy(weir.Map(src, func(s string) count { return count{userOf(s), 1} }).WithCodec(countCodec),
		func(c count) string { return c.User }, codec.String()), weir.TumblingWindows(time.Second))
	fired := make(chan weir.Windowed[string, count], 100)
	weir.SinkFunc(weir.WindowReduce(ws, func(a, b count) count { a.N += b.N; return a }), func(w weir.Windowed[string, count]) error {
		fired <- w
		return nil
	})
	var late atomic.Int64
	weir.SinkFunc(ws.LateData(), func(count) error { late.Add(1); return nil })
	ctx := testCtx(t)
	j, err := env.Start(ctx)
	require.NoError(t, err)
	// Partition 1's first window closes once its watermark passes it
	// (partition 0 is ahead, partition 2 idle).
	select {
	case w := <-fired:
		require.Equal(t, "behind", w.Key)
		require.EqualValues(t, 100, w.Value.N)
	case <-ctx.Done():
		t.Fatal("no window fired: the empty partition stalled event time")
	}
	j.Cancel()
	_, err = j.Wait()
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, late.Load(), "records of the lagging partition were late")
}

// A savepoint at parallelism 2, restored at 3 (and the other way): every
// partition moves to its new owner with its offset, so the two runs
// together read every record exactly once.
func TestRestoreAtAnotherParallelism(t *testing.T) {
	for _, ps := range [][2]int{{2, 3}, {3, 1}} {
		t.Run(fmt.Sprintf("%d-to-%d", ps[0], ps[1]), func(t *testing.T) {
			addrs := broker(t, map[string]int32{"clicks": 5, "copy": 2})
			first, second := clicks(2000, 3), clicks(3000, 3)[2000:]
			produce(t, addrs, "clicks", 5, first, nil)
			dir := t.TempDir()
			run := func(par int, restore string, bounded bool, seen *atomic.Int64) *weir.Job {
				opts := []weir.Option{weir.WithParallelism(par), weir.WithBufferTimeout(time.Millisecond),
					weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Minute})}
				if restore != "" {
					opts = append(opts, weir.WithRestoreFrom(restore))
				}
				env := weir.NewEnvironment(opts...)
				src := kafka.Source(env, kafka.SourceConfig[string]{Brokers: addrs, Topics: []string{"clicks"},
					Deserializer: kafka.Values(strings2), Bounded: bounded}).UID("clicks")
				counted := weir.Map(src, func(s string) string { seen.Add(1); return s })
				kafka.Sink(counted, kafka.SinkConfig[string]{Brokers: addrs, Topic: "copy", Value: bytesOf,
					Guarantee: kafka.ExactlyOnce, TransactionalIDPrefix: "copy", TransactionTimeout: 2 * time.Minute}).UID("sink")
				j, err := env.Start(testCtx(t))
				require.NoError(t, err)
				return j
			}
			var seen1, seen2 atomic.Int64
			j := run(ps[0], "", false, &seen1)
			waitFor(t, func() bool { return seen1.Load() == int64(len(first)) })
			sp, err := j.StopWithSavepoint(testCtx(t), dir)
			require.NoError(t, err)
			_, err = j.Wait()
			require.NoError(t, err)
			produce(t, addrs, "clicks", 5, second, nil)
			j = run(ps[1], sp, true, &seen2)
			_, err = j.Wait()
			require.NoError(t, err)
			require.EqualValues(t, len(second), seen2.Load(), "the restored run read records again or missed some")
			got := readCommitted(t, addrs, "copy")
			want := append(slices.Clone(first), second...)
			sort.Strings(got)
			sort.Strings(want)
			require.Equal(t, want, got)
		})
	}
}

// waitFor polls cond until it holds or the test's deadline passes.
func waitFor(t *testing.T, cond func() bool) {
	ctx := testCtx(t)
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("condition not reached before the deadline")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestStartOffsets(t *testing.T) {
	addrs := broker(t, map[string]int32{"t": 2})
	base := time.UnixMilli(1_700_000_000_000)
	vals := clicks(100, 1)
	produce(t, addrs, "t", 2, vals, func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) })
	adm := admin(t, addrs)
	// The group committed offset 10 of partition 0 only.
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "t", Partition: 0, At: 10, LeaderEpoch: -1})
	_, err := adm.CommitOffsets(testCtx(t), "g", offs)
	require.NoError(t, err)
	read := func(start kafka.StartOffset) int {
		env := weir.NewEnvironment(weir.WithParallelism(2))
		got, _ := weir.Collect(kafka.Source(env, kafka.SourceConfig[string]{Brokers: addrs, Topics: []string{"t"},
			Deserializer: kafka.Values(strings2), Bounded: true, Start: start, Group: "g"}))
		_, err := env.Execute(testCtx(t))
		require.NoError(t, err)
		return len(got.Values())
	}
	require.Equal(t, 100, read(kafka.Earliest()))
	require.Equal(t, 0, read(kafka.Latest()))
	require.Equal(t, 30, read(kafka.AtTime(base.Add(70*time.Second))))
	require.Equal(t, 50-10, read(kafka.CommittedOffsets(kafka.Latest())))
	require.Equal(t, 50-10+50, read(kafka.CommittedOffsets(kafka.Earliest())))
}

// With CommitOffsets, the offsets of completed checkpoints reach the
// consumer group.
func TestCommitOffsetsToGroup(t *testing.T) {
	addrs := broker(t, map[string]int32{"t": 2})
	produce(t, addrs, "t", 2, clicks(100, 1), nil)
	env := weir.NewEnvironment(weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond}))
	weir.Discard(kafka.Source(env, kafka.SourceConfig[string]{Brokers: addrs, Topics: []string{"t"},
		Deserializer: kafka.Values(strings2), Group: "monitor", CommitOffsets: true}))
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	adm := admin(t, addrs)
	waitFor(t, func() bool {
		resp, err := adm.FetchOffsets(testCtx(t), "monitor")
		if err != nil {
			return false
		}
		var sum int64
		resp.Each(func(o kadm.OffsetResponse) { sum += o.At })
		return sum == 100
	})
	j.Cancel()
	_, err = j.Wait()
	require.ErrorIs(t, err, context.Canceled)
}

// Partitions added while the job runs are discovered and read from their
// start.
func TestPartitionDiscovery(t *testing.T) {
	addrs := broker(t, map[string]int32{"t": 1})
	env := weir.NewEnvironment(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond))
	var n atomic.Int64
	weir.SinkFunc(kafka.Source(env, kafka.SourceConfig[string]{Brokers: addrs, TopicPattern: "^t",
		Deserializer: kafka.Values(strings2), DiscoveryInterval: 20 * time.Millisecond,
		ClientOptions: []kgo.Opt{kgo.MetadataMinAge(10 * time.Millisecond)}}), func(string) error { n.Add(1); return nil })
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	adm := admin(t, addrs)
	_, err = adm.CreatePartitions(testCtx(t), 2, "t")
	require.NoError(t, err)
	_, err = adm.CreateTopic(testCtx(t), 2, 1, nil, "t2")
	require.NoError(t, err)
	produce(t, addrs, "t", 3, clicks(30, 1), nil)
	produce(t, addrs, "t2", 2, clicks(20, 1), nil)
	waitFor(t, func() bool { return n.Load() == 50 })
	j.Cancel()
	_, err = j.Wait()
	require.ErrorIs(t, err, context.Canceled)
}

// A record the deserializer rejects fails the job, naming where it is, or
// is skipped and counted.
func TestBadRecords(t *testing.T) {
	addrs := broker(t, map[string]int32{"t": 1})
	produce(t, addrs, "t", 1, []string{"1", "2", "x", "4"}, nil)
	parse := kafka.Values(func(b []byte) (int64, error) { return strconv.ParseInt(string(b), 10, 64) })
	env := weir.NewEnvironment()
	weir.Discard(kafka.Source(env, kafka.SourceConfig[int64]{Brokers: addrs, Topics: []string{"t"}, Deserializer: parse, Bounded: true}))
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, "kafka: topic t partition 0 offset 2: deserializing")

	var skipped atomic.Int64
	env = weir.NewEnvironment()
	got, _ := weir.Collect(kafka.Source(env, kafka.SourceConfig[int64]{Brokers: addrs, Topics: []string{"t"}, Deserializer: parse,
		Bounded: true, SkipBadRecords: true, Skipped: &skipped}))
	_, err = env.Execute(testCtx(t))
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2, 4}, got.Values())
	require.EqualValues(t, 1, skipped.Load())
}

func TestConfigurationErrors(t *testing.T) {
	addrs := []string{"127.0.0.1:1"}
	des := kafka.Values(strings2)
	ck := weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Minute})
	tests := []struct {
		name string
		opts []weir.Option
		src  kafka.SourceConfig[string]
		sink kafka.SinkConfig[string]
		want string
	}{
		{name: "no brokers", src: kafka.SourceConfig[string]{Topics: []string{"t"}, Deserializer: des}, want: "kafka: source: no brokers"},
		{name: "no topics", src: kafka.SourceConfig[string]{Brokers: addrs, Deserializer: des}, want: "exactly one of Topics and TopicPattern"},
		{name: "both", src: kafka.SourceConfig[string]{Brokers: addrs, Topics: []string{"t"}, TopicPattern: "t", Deserializer: des}, want: "exactly one of Topics and TopicPattern"},
		{name: "bad pattern", src: kafka.SourceConfig[string]{Brokers: addrs, TopicPattern: "(", Deserializer: des}, want: "topic pattern"},
		{name: "no deserializer", src: kafka.SourceConfig[string]{Brokers: addrs, Topics: []string{"t"}}, want: "no deserializer"},
		{name: "bounded discovery", src: kafka.SourceConfig[string]{Brokers: addrs, Topics: []string{"t"}, Deserializer: des, Bounded: true, DiscoveryInterval: time.Second}, want: "bounded source does not discover"},
		{name: "committed without group", src: kafka.SourceConfig[string]{Brokers: addrs, Topics: []string{"t"}, Deserializer: des, Start: kafka.CommittedOffsets(kafka.Earliest())}, want: "need a Group"},
		{name: "sink no topic", sink: kafka.SinkConfig[string]{Brokers: addrs, Value: bytesOf}, want: "set Topic or TopicSelector"},
		{name: "sink no value", sink: kafka.SinkConfig[string]{Brokers: addrs, Topic: "t"}, want: "no value serializer"},
		{name: "exactly once without prefix", opts: []weir.Option{ck}, sink: kafka.SinkConfig[string]{Brokers: addrs, Topic: "t", Value: bytesOf, Guarantee: kafka.ExactlyOnce}, want: "needs a TransactionalIDPrefix"},
		{name: "exactly once without checkpointing", sink: kafka.SinkConfig[string]{Brokers: addrs, Topic: "t", Value: bytesOf, Guarantee: kafka.ExactlyOnce, TransactionalIDPrefix: "p"}, want: "needs checkpointing"},
		{name: "transaction timeout", opts: []weir.Option{ck}, sink: kafka.SinkConfig[string]{Brokers: addrs, Topic: "t", Value: bytesOf, Guarantee: kafka.ExactlyOnce, TransactionalIDPrefix: "p", TransactionTimeout: 30 * time.Second}, want: "transaction timeout 30s must exceed the checkpoint interval 1m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := weir.NewEnvironment(tt.opts...)
			if tt.src.Brokers != nil || tt.src.Topics != nil || tt.sink.Brokers == nil {
				weir.Discard(kafka.Source(env, tt.src))
			} else {
				kafka.Sink(weir.FromSlice(env, []string{"a"}), tt.sink)
			}
			_, err := env.Execute(testCtx(t))
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// A missing topic or unreachable brokers fail the job with a clear error,
// without hanging.
func TestUnavailableKafkaFailsTheJob(t *testing.T) {
	addrs := broker(t, map[string]int32{"t": 1})
	env := weir.NewEnvironment()
	weir.Discard(kafka.Source(env, kafka.SourceConfig[string]{Brokers: addrs, Topics: []string{"t", "nope"}, Deserializer: kafka.Values(strings2)}))
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, `kafka: topic "nope" does not exist`)

	env = weir.NewEnvironment()
	weir.Discard(kafka.Source(env, kafka.SourceConfig[string]{Brokers: []string{"127.0.0.1:1"}, Topics: []string{"t"},
		Deserializer: kafka.Values(strings2), RequestTimeout: 500 * time.Millisecond}))
	_, err = env.Execute(testCtx(t))
	require.ErrorContains(t, err, "kafka: looking up topics at [127.0.0.1:1]")
	require.True(t, errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "connection refused"), "%v", err)
}

// A transaction a failed attempt left open (named after a checkpoint the
// job never completed) is aborted at startup: it never becomes visible and
// does not hold back read-committed readers of the job's output.
func TestLingeringTransactionIsAborted(t *testing.T) {
	addrs := broker(t, map[string]int32{"in": 1, "out": 1})
	produce(t, addrs, "in", 1, []string{"a", "b"}, nil)
	zombie, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.TransactionalID("job-0-7"))
	require.NoError(t, err)
	require.NoError(t, zombie.BeginTransaction())
	require.NoError(t, zombie.ProduceSync(testCtx(t), &kgo.Record{Topic: "out", Value: []byte("zombie")}).FirstErr())
	zombie.Close() // the transaction stays open on the broker

	env := weir.NewEnvironment(weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond}))
	src := kafka.Source(env, kafka.SourceConfig[string]{Brokers: addrs, Topics: []string{"in"}, Deserializer: kafka.Values(strings2), Bounded: true})
	kafka.Sink(src, kafka.SinkConfig[string]{Brokers: addrs, Topic: "out", Value: bytesOf, Guarantee: kafka.ExactlyOnce,
		TransactionalIDPrefix: "job", TransactionTimeout: 2 * time.Minute})
	_, err = env.Execute(testCtx(t))
	require.NoError(t, err)
	got := readCommitted(t, addrs, "out")
	slices.Sort(got)
	require.Equal(t, []string{"a", "b"}, got)
}

// A record's event timestamp becomes its timestamp in the output topic
// (records without one get the time of production).
func TestSinkKeepsEventTimestamps(t *testing.T) {
	addrs := broker(t, map[string]int32{"in": 2, "out": 1})
	base := time.UnixMilli(1_700_000_000_000)
	in := clicks(200, 3)
	produce(t, addrs, "in", 2, in, func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) })
	env := weir.NewEnvironment(weir.WithParallelism(2),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond}))
	src := kafka.Source(env, kafka.SourceConfig[string]{Brokers: addrs, Topics: []string{"in"}, Bounded: true,
		Deserializer: kafka.Values(strings2), Watermarks: weir.BoundedOutOfOrderness[string](time.Second, nil)})
	kafka.Sink(src, kafka.SinkConfig[string]{Brokers: addrs, Topic: "out", Value: bytesOf, Guarantee: kafka.ExactlyOnce,
		TransactionalIDPrefix: "ts"})
	_, err := env.Execute(testCtx(t))
	require.NoError(t, err)

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("out"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	require.NoError(t, err)
	defer cl.Close()
	ctx := testCtx(t)
	got := map[string]time.Time{}
	for len(got) < len(in) {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)] = r.Timestamp })
	}
	for i, v := range in {
		require.Equal(t, base.Add(time.Duration(i)*time.Second).UnixMilli(), got[v].UnixMilli(), "record %q", v)
	}
}
