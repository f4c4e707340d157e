package weirtest_test

import (
	"context"
	"fmt"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/weirtest"
)

// Check runs seeds without a testing.T (a soak from a command, say) and
// returns the report; a failing seed comes back as an error naming it.
func ExampleCheck() {
	rep, err := weirtest.Check(context.Background(), weirtest.Config{Seeds: 3, Kinds: weirtest.Of(weirtest.TaskFailure)},
		func(r *weirtest.R) {
			env := r.Env(weir.WithParallelism(2))
			src := weir.FromGenerator(env, 10_000, func(i int64) int64 { return i }).WithCodec(codec.Int64())
			weirtest.Collect(r, weir.Map(src, func(i int64) int64 { return i * i }).WithCodec(codec.Int64()), nil)
		})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range rep.Seeds {
		fmt.Printf("seed %d: %d faults fired, %s\n", s.Seed, s.Fired, s.Verdict.Summary())
	}
	// Output:
	// seed 1: 3 faults fired, ok
	// seed 2: 1 faults fired, ok
	// seed 3: 1 faults fired, ok
}
