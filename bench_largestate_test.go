package weir_test

import (
	"flag"
	"fmt"
	"testing"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/cputime"
)

// jobKeys is the number of keys of BenchmarkJobLargeState; 0 (the
// default, so that `make bench` does not run it: loading the state takes
// minutes) skips it. Run it with, e.g.,
//
//	go test -run '^$' -bench BenchmarkJobLargeState -benchtime 20000000x -args -job.keys=10000000
//
// (b.N should be at least twice the keys: the first pass creates them).
var jobKeys = flag.Int("job.keys", 0, "keys of BenchmarkJobLargeState (0: skip it)")

// cachedKVBytes is what one key of the keyed-sum job takes in the pebble
// backend's write-back cache: its accounted overhead (128 bytes), the data
// key (six bytes of key group and state, a length and the 8-byte key) and
// the 16-byte kv value.
const cachedKVBytes = 128 + 15 + 16

// BenchmarkJobLargeState is the keyed-sum job of BenchmarkJobInProcess
// (p=1) with -job.keys keys, visited in turn (record i has key i mod
// keys, so that every record of a run longer than the keys updates a key
// that exists and that a cache smaller than the state does not hold), on
// the heap and on pebble with a write-back cache of 1 % of the state.
// cpu-ns/op is the process's CPU time per record.
func BenchmarkJobLargeState(b *testing.B) {
	keys := int64(*jobKeys)
	if keys <= 0 {
		b.Skip("-job.keys not set")
	}
	for _, bk := range []struct {
		name string
		opts []weir.Option
	}{
		{"heap", nil},
		{"pebble/cache=1%", []weir.Option{weir.WithStateBackend(weir.PebbleBackend(weir.PebbleOptions{
			Dir: b.TempDir(), CacheBytes: keys * cachedKVBytes / 100}))}},
	} {
		b.Run(fmt.Sprintf("backend=%s/keys=%d", bk.name, keys), func(b *testing.B) {
			b.ReportAllocs()
			env := weir.NewEnvironment(append([]weir.Option{weir.WithParallelism(1)}, bk.opts...)...)
			src := weir.FromGenerator(env, int64(b.N), func(i int64) kv { return kv{i % keys, i} }).WithCodec(kvCodec)
			sums := weir.Reduce(weir.KeyBy(src, func(x kv) int64 { return x.K }, codec.Int64()),
				func(a, b kv) kv { return kv{a.K, a.V + b.V} })
			weir.Discard(sums)
			cpu := cputime.Process()
			if _, err := env.Execute(b.Context()); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
