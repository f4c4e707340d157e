package nats_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	weirnats "github.com/weirstream/weir/connectors/nats"
	"github.com/weirstream/weir/connectors/nats/natstest"
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

// server starts an in-process NATS server with JetStream, stored in a
// temporary directory, for the test.
func server(t testing.TB) *natstest.Server {
	s, err := natstest.Start(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

func jsClient(t testing.TB, url string) jetstream.JetStream {
	nc, err := natsgo.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// createStream creates a file-stored stream name with subjects.
func createStream(t testing.TB, url, name string, subjects ...string) {
	createStreamWith(t, url, jetstream.StreamConfig{Name: name, Subjects: subjects})
}

func createStreamWith(t testing.TB, url string, cfg jetstream.StreamConfig) {
	_, err := jsClient(t, url).CreateStream(testCtx(t), cfg)
	require.NoError(t, err)
}

// publish publishes vals, the i-th to subject(i), and waits for their
// acknowledgements; hdr, if set, adds headers.
func publish(t testing.TB, url string, subject func(i int) string, vals []string, hdr func(i int) natsgo.Header) {
	js := jsClient(t, url)
	for i, v := range vals {
		m := &natsgo.Msg{Subject: subject(i), Data: []byte(v)}
		if hdr != nil {
			m.Header = hdr(i)
		}
		_, err := js.PublishMsgAsync(m)
		require.NoError(t, err)
		if i%1000 == 999 || i == len(vals)-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-testCtx(t).Done():
				t.Fatal("publishing: acknowledgements still missing")
			}
		}
	}
}

// readStream reads every message the stream holds now, in order.
func readStream(t testing.TB, url, stream string) []string {
	ctx := testCtx(t)
	js := jsClient(t, url)
	s, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	last := s.CachedInfo().State.LastSeq
	if s.CachedInfo().State.Msgs == 0 {
		return nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	var out []string
	for {
		b, err := c.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		for m := range b.Messages() {
			out = append(out, string(m.Data()))
			md, err := m.Metadata()
			require.NoError(t, err)
			if md.Sequence.Stream >= last {
				return out
			}
		}
		require.NoError(t, b.Error(), "reading %s: %d messages so far, up to sequence %d", stream, len(out), last)
	}
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

// requireSame fails the test with what is missing and what is extra
// (the first few of each) unless got is want (both sorted).
func requireSame(t testing.TB, want, got []string) {
	t.Helper()
	if slices.Equal(want, got) {
		return
	}
	w, g := map[string]int{}, map[string]int{}
	for _, v := range want {
		w[v]++
	}
	for _, v := range got {
		g[v]++
	}
	var missing, extra []string
	for v, n := range w {
		if g[v] < n {
			missing = append(missing, v)
		}
	}
	for v, n := range g {
		if w[v] < n {
			extra = append(extra, v)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	t.Fatalf("got %d records, want %d: %d missing (%v), %d extra or duplicated (%v)",
		len(got), len(want), len(missing), missing[:min(10, len(missing))], len(extra), extra[:min(10, len(extra))])
}

// count is a user's running count of clicks.
type count struct {
	User string
	N    int64
}

var countCodec = codec.Struct2(codec.String(), func(c count) string { return c.User },
	codec.Int64(), func(c count) int64 { return c.N }, func(u string, n int64) count { return count{u, n} })

func str(b []byte) (string, error)     { return string(b), nil }
func bytesOf(s string) ([]byte, error) { return []byte(s), nil }

// partitions is the split count of the clicks stream: subjects
// clicks.0 .. clicks.3.
const partitions = 4

func clickSubject(i int) string { return "clicks." + strconv.Itoa(i%partitions) }

// clicksStreams creates the clicks stream (partitioned by subject) and the
// counts stream on url.
func clicksStreams(t testing.TB, url string) {
	createStream(t, url, "clicks", "clicks.*")
	createStream(t, url, "counts", "counts")
}

// countingJob builds clicks (NATS) -> running count per user (keyed
// state) -> counts (NATS), with failures from k.
func countingJob(env *weir.Environment, url string, k *killer, g weirnats.Guarantee) {
	src := weirnats.Source(env, weirnats.SourceConfig[string]{URL: url, Stream: "clicks", Consumer: "counting",
		Subjects: weirnats.PartitionSubjects("clicks.%d", partitions), Deserializer: weirnats.Values(str), Bounded: true}).UID("clicks")
	faulty := weir.Map(src, func(s string) count { k.check(); return count{userOf(s), 1} }).WithCodec(countCodec)
	counts := weir.Reduce(weir.KeyBy(faulty, func(c count) string { return c.User }, codec.String()),
		func(a, b count) count { a.N += b.N; return a }).UID("counts")
	out := weir.Map(counts, func(c count) string { return c.User + ":" + strconv.FormatInt(c.N, 10) })
	weirnats.Sink(out, weirnats.SinkConfig[string]{URL: url, Subject: "counts", Value: bytesOf, Guarantee: g,
		MsgIDPrefix: "counting"}).UID("sink")
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

// completed reports whether the job has completed at least n checkpoints.
func (k *killer) completed(n int) bool {
	j := k.job.Load()
	return j != nil && j.CheckpointStats().Completed >= n
}

// checkpointed is the environment of the fault tests: checkpoints every
// 10 ms, restarts after 10 ms.
func checkpointed(p int, opts ...weir.Option) *weir.Environment {
	return weir.NewEnvironment(append([]weir.Option{weir.WithParallelism(p), weir.WithBufferTimeout(time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Millisecond, TolerableFailures: 1000}),
		weir.WithRestartStrategy(weir.FixedDelayRestart(200, 10*time.Millisecond))}, opts...)...)
}
