// Command exactlyonce runs a keyed sum over a deterministic input with
// checkpoints every 100 ms, kills tasks at random moments, and verifies
// that every key's sum and the committed sink output equal the no-failure
// answer exactly. It exits non-zero on any mismatch.
//
//	go run ./examples/exactlyonce -records 10000000 -failures 10 -seed 42
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
)

type kv struct{ K, V int64 }

var kvCodec = codec.Struct2(
	codec.Int64(), func(x kv) int64 { return x.K },
	codec.Int64(), func(x kv) int64 { return x.V },
	func(k, v int64) kv { return kv{k, v} })

// store is the sink's destination: transactions become visible only when
// committed, and committing twice is harmless.
type store struct {
	mu        sync.Mutex
	pending   map[int64][]kv // transaction id -> its writes (pre-committed or open)
	committed map[int64][]kv
	nextID    atomic.Int64
}

type committer struct {
	s *store
}

func (c committer) Begin() (int64, error) {
	id := c.s.nextID.Add(1)
	c.s.mu.Lock()
	c.s.pending[id] = nil
	c.s.mu.Unlock()
	return id, nil
}

func (c committer) Write(txn int64, v kv) error {
	c.s.mu.Lock()
	c.s.pending[txn] = append(c.s.pending[txn], v)
	c.s.mu.Unlock()
	return nil
}

func (c committer) PreCommit(int64) error { return nil }

func (c committer) Commit(txn int64) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if vs, ok := c.s.pending[txn]; ok {
		c.s.committed[txn] = vs
		delete(c.s.pending, txn)
	}
	return nil
}

func (c committer) Abort(txn int64) error {
	c.s.mu.Lock()
	delete(c.s.pending, txn)
	c.s.mu.Unlock()
	return nil
}

func main() {
	n := flag.Int64("records", 10_000_000, "input records")
	failures := flag.Int("failures", 10, "task failures to inject")
	seed := flag.Uint64("seed", uint64(time.Now().UnixNano()), "random seed (printed; reuse it to reproduce a run)")
	par := flag.Int("p", 2, "parallelism")
	keys := flag.Int64("keys", 1000, "distinct keys")
	flag.Parse()
	fmt.Printf("seed %d: %d records, %d keys, parallelism %d, %d injected failures\n", *seed, *n, *keys, *par, *failures)
	if err := run(*n, *keys, *par, *failures, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "exactlyonce:", err)
		os.Exit(1)
	}
}

func run(n, keys int64, par, failures int, seed uint64) error {
	r := rand.New(rand.NewPCG(seed, 1))
	// Failures at random points of the processed-record count, in random
	// stages and subtasks.
	type failure struct {
		at    int64
		stage int
	}
	plan := make([]failure, failures)
	var at int64
	for i := range plan {
		at += 1 + r.Int64N(max(1, 2*n/int64(failures+1)))
		plan[i] = failure{at: at, stage: r.IntN(2)}
	}
	var processed atomic.Int64
	var next atomic.Int64
	maybeFail := func(stage int) {
		c := processed.Add(1)
		k := next.Load()
		if int(k) < len(plan) && c >= plan[k].at && plan[k].stage == stage && next.CompareAndSwap(k, k+1) {
			panic(fmt.Sprintf("injected failure %d (stage %d, record %d)", k+1, stage, c))
		}
	}

	restart := weir.FixedDelayRestart(failures+5, 50*time.Millisecond)
	env := weir.NewEnvironment(weir.WithParallelism(par),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 100 * time.Millisecond, TolerableFailures: failures}),
		weir.WithRestartStrategy(restart))
	src := weir.FromGenerator(env, n, func(i int64) kv { return kv{i % keys, i % 1000} }).WithCodec(kvCodec)
	mapped := weir.Map(src, func(x kv) kv { maybeFail(0); return x }).Name("pre").WithCodec(kvCodec)
	sums := weir.Reduce(weir.KeyBy(mapped, func(x kv) int64 { return x.K }, codec.Int64()),
		func(a, b kv) kv { return kv{a.K, a.V + b.V} }).Name("sum")
	post := weir.Map(sums, func(x kv) kv { maybeFail(1); return x }).Name("post").WithCodec(kvCodec)
	st := &store{pending: map[int64][]kv{}, committed: map[int64][]kv{}}
	weir.TwoPhaseCommitSink(post, codec.Int64(), func(sub, p int) (weir.TwoPhaseCommitter[kv, int64], error) {
		return committer{st}, nil
	}).Name("transactional sink")

	start := time.Now()
	res, err := env.Execute(context.Background())
	if err != nil {
		return err
	}
	// The no-failure answer.
	want := make(map[int64]int64, keys)
	for i := int64(0); i < n; i++ {
		want[i%keys] += i % 1000
	}
	got := map[int64]int64{}
	var outputs int64
	for _, vs := range st.committed {
		for _, v := range vs {
			got[v.K] = max(got[v.K], v.V)
			outputs++
		}
	}
	fmt.Printf("finished in %v with %s; %s completed", time.Since(start).Round(time.Millisecond),
		count(res.Restarts, "restart"), count(res.Checkpoints.Completed, "checkpoint"))
	if f := res.Checkpoints.Failed; f > 0 {
		// A checkpoint in flight when a task fails cannot complete: the
		// failover aborts it, and it counts as failed (as in Flink). The
		// job restarts from the latest completed one.
		fmt.Printf(", %d failed (a checkpoint in flight when a task fails is aborted by the restart and counts as failed, as in Flink)", f)
	}
	fmt.Println()
	bad := 0
	for k, w := range want {
		if got[k] != w {
			bad++
			if bad <= 5 {
				fmt.Printf("key %d: sum %d, want %d\n", k, got[k], w)
			}
		}
	}
	if outputs != n {
		return fmt.Errorf("committed %d outputs, want exactly %d (one per input)", outputs, n)
	}
	if bad > 0 || len(got) != len(want) {
		return fmt.Errorf("%d of %d keys differ", bad, len(want))
	}
	if fired := int(next.Load()); fired != failures || res.Restarts < min(1, fired) || res.Restarts > fired {
		// Two failures in one attempt cause one restart.
		return fmt.Errorf("%d of %d failures fired, %s", fired, failures, count(res.Restarts, "restart"))
	}
	fmt.Printf("verified: all %d key sums and %d committed outputs equal the no-failure run (exactly once)\n", len(want), outputs)
	return nil
}

// count is n and word, in the plural unless n is 1 ("1 restart", "2
// restarts").
func count[N int | int64](n N, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
