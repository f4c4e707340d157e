// Command quickstart is the README's quick start: running sums per key
// over generated values, checkpointed every 100 ms, collected in memory.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
)

// Sum is the running total of one key.
type Sum struct {
	Key, Total int64
}

// sumCodec serializes a Sum: values that cross a task boundary or are
// checkpointed need a codec (built-in types have one).
var sumCodec = codec.Struct2(
	codec.Int64(), func(s Sum) int64 { return s.Key },
	codec.Int64(), func(s Sum) int64 { return s.Total },
	func(k, t int64) Sum { return Sum{k, t} })

func main() {
	env := weir.NewEnvironment(weir.WithParallelism(2),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 100 * time.Millisecond}))
	// 100,000 values, keyed by their last digit: ten keys.
	src := weir.FromGenerator(env, 100_000, func(i int64) Sum { return Sum{Key: i % 10, Total: i} }).
		WithCodec(sumCodec)
	// Reduce emits every update: one rolling sum per input value, 100,000
	// of them; the largest of each key is its total.
	sums := weir.Reduce(weir.KeyBy(src, func(s Sum) int64 { return s.Key }, codec.Int64()),
		func(acc, v Sum) Sum { return Sum{acc.Key, acc.Total + v.Total} })
	out, _ := weir.Collect(sums)

	res, err := env.Execute(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	totals := make([]int64, 10)
	for _, s := range out.Values() {
		totals[s.Key] = max(totals[s.Key], s.Total)
	}
	fmt.Println(len(out.Values()), "updates,", res.Restarts, "restarts; totals per key:")
	for k, t := range totals {
		fmt.Println(k, t)
	}
}
