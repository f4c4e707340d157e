package weir_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

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
