package weir_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
)

// A keyed job: count words, exactly once with checkpoints.
func Example() {
	env := weir.NewEnvironment(weir.WithParallelism(2),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 100 * time.Millisecond}))
	lines := weir.FromSlice(env, []string{"to be or not to be", "that is the question"})
	words := weir.FlatMap(lines, func(l string, emit func(string)) {
		for _, w := range strings.Fields(l) {
			emit(w)
		}
	})
	counts := weir.Reduce(weir.KeyBy(weir.Map(words, func(w string) wordCount { return wordCount{w, 1} }).WithCodec(wordCountCodec),
		func(c wordCount) string { return c.Word }, codec.String()),
		func(acc, c wordCount) wordCount { return wordCount{acc.Word, acc.N + c.N} })
	got, _ := weir.Collect(counts)
	if _, err := env.Execute(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	final := map[string]int64{}
	for _, c := range got.Values() {
		final[c.Word] = max(final[c.Word], c.N)
	}
	words2 := make([]string, 0, len(final))
	for w := range final {
		words2 = append(words2, w)
	}
	slices.Sort(words2)
	for _, w := range words2 {
		fmt.Println(w, final[w])
	}
	// Output:
	// be 2
	// is 1
	// not 1
	// or 1
	// question 1
	// that 1
	// the 1
	// to 2
}

type wordCount struct {
	Word string
	N    int64
}

var wordCountCodec = codec.Struct2(codec.String(), func(c wordCount) string { return c.Word },
	codec.Int64(), func(c wordCount) int64 { return c.N },
	func(w string, n int64) wordCount { return wordCount{w, n} })

// An event-time job: sums per key over tumbling one-second windows of
// event time, with watermarks that allow values to arrive up to 100 ms out
// of order.
func ExampleWindow() {
	type event struct {
		Key string
		TS  int64 // event time, ms
		N   int64
	}
	env := weir.NewEnvironment()
	evs := weir.FromSlice(env, []event{{"a", 100, 1}, {"b", 400, 5}, {"a", 950, 2}, {"a", 1200, 4}, {"a", 900, 3}}).
		WithCodec(codec.JSON[event]())
	stamped := weir.AssignTimestamps(evs, weir.BoundedOutOfOrderness(100*time.Millisecond, func(e event) int64 { return e.TS }))
	sums := weir.WindowReduce(weir.Window(weir.KeyBy(stamped, func(e event) string { return e.Key }, codec.String()),
		weir.TumblingWindows(time.Second)),
		func(acc, e event) event { acc.N += e.N; return acc })
	weir.SinkFunc(sums, func(w weir.Windowed[string, event]) error {
		fmt.Printf("%s %v %d\n", w.Key, w.Window, w.Value.N)
		return nil
	})
	if _, err := env.Execute(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Unordered output:
	// a [0,1000) 6
	// b [0,1000) 5
	// a [1000,2000) 4
}

// A highly available job (README: High availability): coordinators stand
// for election in etcd and a lost term stands again; workers follow the
// leader. Compiled, not run: it needs an etcd.
func ExampleHAConfig() {
	ctx := context.Background()
	buildJob := func(opts ...weir.Option) *weir.Environment {
		env := weir.NewEnvironment(append(opts, weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Second, Dir: "/shared/checkpoints"}))...)
		weir.Discard(weir.FromSlice(env, []int{1, 2, 3}))
		return env
	}
	workerID, addr, token := flag.String("worker", "", "worker ID"), ":7000", "secret"
	var err error
	ha := &weir.HAConfig{Endpoints: []string{"http://etcd:2379"}, JobID: "wordcount"}
	if *workerID != "" {
		err = buildJob().RunWorker(ctx, weir.WorkerConfig{ID: *workerID, Token: token, HA: ha})
	} else {
		for {
			_, err = buildJob(weir.WithCluster(weir.ClusterConfig{Listen: addr, Workers: 2, Token: token, HA: ha})).Execute(ctx)
			if !errors.Is(err, weir.ErrLeadershipLost) {
				break // the job ended (or ctx did); a lost term stands again
			}
		}
	}
	_ = err
}

// Click is a user's click at event time TS (unix ms).
type Click struct {
	User string
	TS   int64
}

var clickCodec = codec.Struct2(
	codec.String(), func(c Click) string { return c.User },
	codec.Int64(), func(c Click) int64 { return c.TS },
	func(u string, ts int64) Click { return Click{u, ts} })

// Sessions of clicks per user: a session ends after 30 s of event time
// without a click. A bounded input ends with the maximum watermark, so
// every session closes.
func ExampleSessionWindows() {
	env := weir.NewEnvironment()
	s := int64(time.Second / time.Millisecond)
	clicks := weir.FromSlice(env, []Click{{"ann", 0}, {"bob", 5 * s}, {"ann", 20 * s}, {"ann", 45 * s}, {"ann", 100 * s}, {"bob", 12 * s}}).
		WithCodec(clickCodec)

	stamped := weir.AssignTimestamps(clicks,
		weir.BoundedOutOfOrderness(5*time.Second, func(c Click) int64 { return c.TS }).
			WithIdleness(time.Minute))
	perUser := weir.KeyBy(stamped, func(c Click) string { return c.User }, codec.String())
	sessions := weir.Window(perUser, weir.SessionWindows(30*time.Second)).AllowedLateness(time.Minute)
	counts := weir.WindowAggregate(sessions, weir.AggregateFunction[Click, int64, int64]{
		New: func() int64 { return 0 }, Add: func(n int64, _ Click) int64 { return n + 1 },
		Merge: func(a, b int64) int64 { return a + b }, Result: func(n int64) int64 { return n }}, nil)
	late := sessions.LateData() // values later than the allowed lateness

	weir.SinkFunc(counts, func(w weir.Windowed[string, int64]) error {
		fmt.Printf("%s: %d clicks in %v\n", w.Key, w.Value, w.Window)
		return nil
	})
	weir.SinkFunc(late, func(c Click) error { fmt.Println("late:", c); return nil })
	if _, err := env.Execute(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Unordered output:
	// ann: 3 clicks in [0,75000)
	// ann: 1 clicks in [100000,130000)
	// bob: 2 clicks in [5000,42000)
}

// Reading is one measurement of a sensor.
type Reading struct {
	Sensor string
	Value  float64
}

// readingCodec serializes a Reading field by field: codec.Struct2 takes
// each field's codec and getter, then a constructor (Struct3 and Struct4
// take three and four fields; codec.JSON[T]() serializes any type, more
// slowly).
var readingCodec = codec.Struct2(
	codec.String(), func(r Reading) string { return r.Sensor },
	codec.Float64(), func(r Reading) float64 { return r.Value },
	func(s string, v float64) Reading { return Reading{s, v} })

// Values of a struct type need a codec when they cross from one task to
// another (here from the source to the keyed maximum) or are
// checkpointed: WithCodec goes on the stream that carries them, right
// after the operator that makes them.
func ExampleStream_WithCodec() {
	env := weir.NewEnvironment(weir.WithParallelism(2))
	readings := weir.FromSlice(env, []Reading{{"a", 20.5}, {"b", 18}, {"a", 21.25}, {"b", 17.5}}).
		WithCodec(readingCodec)
	hottest := weir.Reduce(weir.KeyBy(readings, func(r Reading) string { return r.Sensor }, codec.String()),
		func(a, b Reading) Reading {
			if b.Value > a.Value {
				return b
			}
			return a
		})
	labels := weir.Map(hottest, func(r Reading) string { return fmt.Sprintf("%s %.2f", r.Sensor, r.Value) })
	weir.SinkFunc(labels, func(s string) error { fmt.Println(s); return nil }).Parallelism(1)
	if _, err := env.Execute(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Unordered output:
	// a 20.50
	// a 21.25
	// b 18.00
	// b 18.00
}

// A job whose function fails now and then restarts from its latest
// checkpoint: here up to 3 times, 10 ms apart (Flink's fixed-delay
// strategy), and gives up at the 4th failure.
func ExampleWithRestartStrategy() {
	var failures atomic.Int64
	env := weir.NewEnvironment(
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 100 * time.Millisecond}),
		weir.WithRestartStrategy(weir.FixedDelayRestart(3, 10*time.Millisecond)))
	weir.Discard(weir.MapErr(weir.FromSlice(env, []int64{1, 2, 3}), func(v int64) (int64, error) {
		if v == 2 && failures.Add(1) <= 2 {
			return 0, errors.New("flaky")
		}
		return v, nil
	}))
	res, err := env.Execute(context.Background())
	fmt.Println(res.Restarts, "restarts, error:", err)
	// Output:
	// 2 restarts, error: <nil>
}

// KeySum is a running sum of one key.
type KeySum struct{ Key, Sum int64 }

var keySumCodec = codec.Struct2(
	codec.Int64(), func(s KeySum) int64 { return s.Key },
	codec.Int64(), func(s KeySum) int64 { return s.Sum },
	func(k, s int64) KeySum { return KeySum{k, s} })

// A savepoint stops a job, and a new job built the same way continues
// from it: the running sums go on, the source resumes where it stopped.
func ExampleJob_StopWithSavepoint() {
	dir, err := os.MkdirTemp("", "weir-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	// build builds the job: 3,000 numbers at 3,000 a second, summed per
	// key (even, odd); ran is closed once 100 numbers went through.
	ran := make(chan struct{})
	var seen atomic.Int64
	build := func(opts ...weir.Option) (*weir.Environment, *weir.Collected[KeySum]) {
		env := weir.NewEnvironment(append(opts, weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))...)
		nums := weir.FromGenerator(env, 3000, func(i int64) KeySum { return KeySum{i % 2, i} }, weir.Rate(3000)).
			WithCodec(keySumCodec)
		nums = weir.Map(nums, func(v KeySum) KeySum {
			if seen.Add(1) == 100 {
				close(ran)
			}
			return v
		}).WithCodec(keySumCodec)
		sums := weir.Reduce(weir.KeyBy(nums, func(v KeySum) int64 { return v.Key }, codec.Int64()),
			func(acc, v KeySum) KeySum { return KeySum{acc.Key, acc.Sum + v.Sum} }).UID("sums")
		got, _ := weir.Collect(sums)
		return env, got
	}
	ctx := context.Background()
	env, _ := build()

	job, err := env.Start(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	<-ran
	path, err := job.StopWithSavepoint(ctx, filepath.Join(dir, "savepoints"))
	if err != nil {
		fmt.Println(err)
		return
	}
	env2, sums := build(weir.WithRestoreFrom(path))
	if _, err := env2.Execute(ctx); err != nil {
		fmt.Println(err)
		return
	}

	var totals [2]int64
	for _, s := range sums.Values() {
		totals[s.Key] = max(totals[s.Key], s.Sum)
	}
	fmt.Println("even:", totals[0], "odd:", totals[1])
	// Output:
	// even: 2248500 odd: 2250000
}

// buildJob builds the job of the cluster example: every process of the
// program builds the same one. Checkpoints and the file sink's output go
// under dir, which every process must reach.
func buildJob(dir string, opts ...weir.Option) *weir.Environment {
	env := weir.NewEnvironment(append(opts, weir.WithParallelism(2),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 100 * time.Millisecond, Dir: filepath.Join(dir, "checkpoints")}))...)
	words := weir.FromSlice(env, strings.Fields("to be or not to be that is the question"))
	ones := weir.Map(words, func(w string) wordCount { return wordCount{w, 1} }).WithCodec(wordCountCodec)
	counts := weir.Reduce(weir.KeyBy(ones, func(c wordCount) string { return c.Word }, codec.String()),
		func(acc, c wordCount) wordCount { return wordCount{acc.Word, acc.N + c.N} })
	weir.FileSink(counts, filepath.Join(dir, "out"), func(c wordCount) []byte { return fmt.Appendf(nil, "%s %d", c.Word, c.N) })
	return env
}

// A job across processes: a coordinator and two workers, here goroutines
// of one process, each with its own environment as separate processes
// would have.
func ExampleEnvironment_RunWorker() {
	dir, err := os.MkdirTemp("", "weir-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	ln, err := net.Listen("tcp", "127.0.0.1:0") // where the workers find the coordinator
	if err != nil {
		fmt.Println(err)
		return
	}
	addr, token := ln.Addr().String(), "s3cret"
	var wg sync.WaitGroup
	for _, id := range []string{"w1", "w2"} {
		wg.Go(func() { // each worker: a process of its own in a real deployment
			err := buildJob(dir).RunWorker(ctx, weir.WorkerConfig{Coordinator: addr, ID: id, Token: token})
			if err != nil {
				fmt.Println(id, err)
			}
		})
	}
	_, err = buildJob(dir, weir.WithCluster(weir.ClusterConfig{Listener: ln, Workers: 2, Token: token})).Execute(ctx)
	wg.Wait() // the coordinator shuts its workers down when the job ends
	if err != nil {
		fmt.Println(err)
		return
	}

	files, _ := filepath.Glob(filepath.Join(dir, "out", "part-*"))
	final := map[string]int64{}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var w string
			var n int64
			if _, err := fmt.Sscan(line, &w, &n); err == nil {
				final[w] = max(final[w], n)
			}
		}
	}
	fmt.Println(final)
	// Output:
	// map[be:2 is:1 not:1 or:1 question:1 that:1 the:1 to:2]
}

// A job's metrics in your own Prometheus registry, served with the rest
// of your program's metrics.
func ExampleJob_PrometheusCollector() {
	env := weir.NewEnvironment(weir.WithJobName("numbers"))
	weir.Discard(weir.FromSlice(env, []int64{1, 2, 3}))
	ctx := context.Background()

	job, err := env.Start(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(job.PrometheusCollector())
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	if _, err := job.Wait(); err != nil {
		fmt.Println(err)
		return
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "weir_job_numRestarts") {
			fmt.Println(line)
		}
	}
	// Output:
	// weir_job_numRestarts{job="numbers"} 0
}

// Keyed state in pebble, an embedded LSM database on local disk, instead
// of the Go heap: for state larger than memory, with incremental
// checkpoints.
func ExamplePebbleBackend() {
	tmp, err := os.MkdirTemp("", "weir-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(tmp)

	env := weir.NewEnvironment(
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 10 * time.Second, Dir: filepath.Join(tmp, "checkpoints")}),
		weir.WithStateBackend(weir.PebbleBackend(weir.PebbleOptions{
			Dir:         filepath.Join(tmp, "state"), // working directories, removed when tasks end (default os.TempDir())
			Incremental: true,                        // checkpoints upload only new files (savepoints stay full)
			// CacheBytes (64 MiB of hot values in the Go heap), BlockCacheSize (64 MiB)
			// and MemTableSize (64 MiB, two of them) per subtask
		})),
	)

	nums := weir.FromGenerator(env, 1000, func(i int64) KeySum { return KeySum{i % 3, i} }).WithCodec(keySumCodec)
	sums := weir.Reduce(weir.KeyBy(nums, func(v KeySum) int64 { return v.Key }, codec.Int64()),
		func(acc, v KeySum) KeySum { return KeySum{acc.Key, acc.Sum + v.Sum} })
	got, _ := weir.Collect(sums)
	if _, err := env.Execute(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	var totals [3]int64
	for _, s := range got.Values() {
		totals[s.Key] = max(totals[s.Key], s.Sum)
	}
	fmt.Println(totals)
	// Output:
	// [166833 166167 166500]
}

// Checkpoints of a back-pressured job: start aligned, go unaligned when
// the alignment takes more than 100 ms, and keep about a second of data
// in flight.
func ExampleCheckpointConfig_unaligned() {
	env := weir.NewEnvironment(weir.WithParallelism(2),
		weir.WithCheckpointing(weir.CheckpointConfig{
			Interval:       time.Second,
			Unaligned:      true,                   // barriers overtake the data in flight
			AlignedTimeout: 100 * time.Millisecond, // start aligned, go unaligned after 100 ms
		}),
		weir.WithBufferDebloating(weir.DebloatConfig{}), // keep about 1 s of data in flight
	)

	nums := weir.FromGenerator(env, 1000, func(i int64) KeySum { return KeySum{i % 2, i} }).WithCodec(keySumCodec)
	sums := weir.Reduce(weir.KeyBy(nums, func(v KeySum) int64 { return v.Key }, codec.Int64()),
		func(acc, v KeySum) KeySum { return KeySum{acc.Key, acc.Sum + v.Sum} })
	got, _ := weir.Collect(sums)
	if _, err := env.Execute(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	var totals [2]int64
	for _, s := range got.Values() {
		totals[s.Key] = max(totals[s.Key], s.Sum)
	}
	fmt.Println(totals)
	// Output:
	// [249500 250000]
}
