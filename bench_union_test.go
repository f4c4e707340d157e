package weir_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/cputime"
)

// unionSum is keyedSum with its input from two generators of n/2 values
// each, united: the keyed sum's task reads both through one gate.
func unionSum(env *weir.Environment, n int64) {
	gen := func(off, n int64) *weir.Stream[kv] {
		return weir.FromGenerator(env, n, func(i int64) kv { return kv{(off + i) & 1023, i} }).WithCodec(kvCodec)
	}
	u := weir.Union(gen(0, n/2), gen(n/2, n-n/2))
	sums := weir.Reduce(weir.KeyBy(u, func(x kv) int64 { return x.K }, codec.Int64()),
		func(a, b kv) kv { return kv{a.K, a.V + b.V} })
	weir.Discard(sums)
}

// BenchmarkUnion runs two generators united into the keyed sum (union)
// beside the single-input keyed sum of BenchmarkJobInProcess (single), in
// the same run, at p=1 and p=2: what reading two inputs through one gate
// costs the keyed operator's task. cpu-ns/op is the CPU time the process
// spent per record, which a busy machine disturbs less than records/s.
func BenchmarkUnion(b *testing.B) {
	for _, p := range []int{1, 2} {
		for _, job := range []struct {
			name  string
			build func(*weir.Environment, int64)
		}{{"single", keyedSum}, {"union", unionSum}} {
			b.Run(fmt.Sprintf("p=%d/%s", p, job.name), func(b *testing.B) {
				b.ReportAllocs()
				env := weir.NewEnvironment(weir.WithParallelism(p))
				job.build(env, int64(b.N))
				cpu := cputime.Process()
				if _, err := env.Execute(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
				b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
