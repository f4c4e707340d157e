package weir_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/task"
)

func sorted[T int64 | int | string](v []T) []T {
	slices.Sort(v)
	return v
}

// transports are the exchanges the end-to-end tests run over: in-memory
// handover, and loopback TCP through weir's own server and client.
var transports = []struct {
	name string
	opt  weir.Option
}{
	{"local", weir.WithTCPExchanges(false)},
	{"tcp", weir.WithTCPExchanges(true)},
}

// forEachTransport runs f as a subtest per transport.
func forEachTransport(t *testing.T, f func(t *testing.T, tr weir.Option)) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { f(t, tr.opt) })
	}
}

// Jobs of 1-4 stages over parallelism 1..4 produce exactly the expected
// multiset, with and without chaining.
func TestStagesAndParallelism(t *testing.T) {
	const n = 5000
	for _, tr := range transports {
		for stages := 1; stages <= 4; stages++ {
			for p := 1; p <= 4; p++ {
				for _, chain := range []bool{true, false} {
					t.Run(fmt.Sprintf("%s/stages=%d/p=%d/chain=%v", tr.name, stages, p, chain), func(t *testing.T) {
						env := weir.NewEnvironment(tr.opt, weir.WithParallelism(p), weir.WithChaining(chain), weir.WithSegmentSize(256))
						s := weir.FromGenerator(env, n, func(i int64) int64 { return i })
						want := make([]int64, n)
						for i := range want {
							want[i] = int64(i)
						}
						for k := 0; k < stages; k++ {
							switch k % 3 {
							case 0:
								s = weir.Map(s, func(v int64) int64 { return v + 1 }).Rebalance()
								for i := range want {
									want[i]++
								}
							case 1:
								s = weir.Map(s, func(v int64) int64 { return v * 2 })
								for i := range want {
									want[i] *= 2
								}
							case 2:
								s = weir.Filter(s, func(v int64) bool { return v%3 != 0 })
								want = slices.DeleteFunc(want, func(v int64) bool { return v%3 == 0 })
							}
							if k%2 == 1 {
								s = s.Parallelism(max(1, p-1))
							}
						}
						got, _ := weir.Collect(s)
						res, err := env.Execute(testCtx(t))
						require.NoError(t, err)
						require.Equal(t, sorted(want), sorted(got.Values()))
						require.Zero(t, res.LeakedSegments)
					})
				}
			}
		}
	}
}

// Hash partitioning sends every key to exactly one subtask.
func TestKeyByRoutesEachKeyToOneSubtask(t *testing.T) {
	forEachTransport(t, testKeyByRoutesEachKeyToOneSubtask)
}

func testKeyByRoutesEachKeyToOneSubtask(t *testing.T, tr weir.Option) {
	env := weir.NewEnvironment(tr, weir.WithParallelism(4))
	s := weir.FromGenerator(env, 20000, func(i int64) int64 { return i % 257 })
	owner := make([]atomic.Int64, 257)
	for i := range owner {
		owner[i].Store(-1)
	}
	var conflicts atomic.Int64
	newFn := func() weir.KeyedProcessFunction[int64, int64, int64] {
		var me int64
		return weir.ProcessFunc(func(rc *weir.RuntimeContext) error {
			me = int64(rc.Subtask)
			return nil
		}, func(key int64, v int64, out *weir.Collector[int64]) error {
			if !owner[key].CompareAndSwap(-1, me) && owner[key].Load() != me {
				conflicts.Add(1)
			}
			return nil
		})
	}
	weir.Discard(weir.Process(weir.KeyBy(s, func(v int64) int64 { return v }, codec.Int64()), newFn))
	_, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	require.Zero(t, conflicts.Load())
	for k := range owner {
		require.NotEqual(t, int64(-1), owner[k].Load(), "key %d never seen", k)
	}
}

// A keyed running sum: the final running value of every key is its total,
// and every input produces one output.
func TestKeyedSum(t *testing.T) {
	forEachTransport(t, testKeyedSum)
}

func testKeyedSum(t *testing.T, tr weir.Option) {
	for p := 1; p <= 3; p++ {
		env := weir.NewEnvironment(tr, weir.WithParallelism(p))
		src := weir.FromGenerator(env, 30000, func(i int64) [2]int64 { return [2]int64{i % 100, i} }).WithCodec(pairCodec)
		sums := weir.Reduce(weir.KeyBy(src, func(v [2]int64) int64 { return v[0] }, codec.Int64()),
			func(a, b [2]int64) [2]int64 { return [2]int64{a[0], a[1] + b[1]} })
		got, _ := weir.Collect(sums)
		_, err := env.Execute(testCtx(t))
		require.NoError(t, err)
		want := map[int64]int64{}
		for i := int64(0); i < 30000; i++ {
			want[i%100] += i
		}
		final := map[int64]int64{}
		for _, v := range got.Values() {
			final[v[0]] = max(final[v[0]], v[1])
		}
		require.Equal(t, want, final)
		require.Len(t, got.Values(), 30000)
	}
}

var pairCodec = codec.Func(
	func(dst []byte, v [2]int64) []byte {
		dst = codec.Int64().Append(dst, v[0])
		return codec.Int64().Append(dst, v[1])
	},
	func(src []byte) ([2]int64, error) {
		if len(src) != 16 {
			return [2]int64{}, fmt.Errorf("pair: %d bytes", len(src))
		}
		a, _ := codec.Int64().Decode(src[:8])
		b, _ := codec.Int64().Decode(src[8:])
		return [2]int64{a, b}, nil
	})

func TestUserErrorAndPanicFailTheJob(t *testing.T) {
	forEachTransport(t, testUserErrorAndPanicFailTheJob)
}

func testUserErrorAndPanicFailTheJob(t *testing.T, tr weir.Option) {
	env := weir.NewEnvironment(tr, weir.WithParallelism(2))
	s := weir.FromGenerator(env, 100000, func(i int64) int64 { return i })
	m := weir.Map(s, func(v int64) int64 {
		if v == 5000 {
			panic("boom")
		}
		return v
	}).Name("exploder").Rebalance()
	weir.Discard(m)
	res, err := env.Execute(testCtx(t))
	require.Error(t, err)
	var te *task.Error
	require.ErrorAs(t, err, &te)
	require.Equal(t, "exploder", te.Operator)
	require.Contains(t, te.Task, "exploder")
	var pe *task.PanicError
	require.ErrorAs(t, err, &pe)
	require.Zero(t, res.LeakedSegments)

	env = weir.NewEnvironment(tr, weir.WithParallelism(2))
	s = weir.FromGenerator(env, 100000, func(i int64) int64 { return i })
	weir.SinkFunc(s.Rebalance(), func(v int64) error {
		if v == 777 {
			return errors.New("sink refused")
		}
		return nil
	}).Name("picky")
	res, err = env.Execute(testCtx(t))
	require.ErrorContains(t, err, "sink refused")
	require.ErrorContains(t, err, "picky")
	require.Zero(t, res.LeakedSegments)
}

func TestBadConfiguration(t *testing.T) {
	for name, opts := range map[string][]weir.Option{
		"zero parallelism":     {weir.WithParallelism(0)},
		"above max":            {weir.WithParallelism(8), weir.WithMaxParallelism(4)},
		"tiny segments":        {weir.WithSegmentSize(2)},
		"negative segments":    {weir.WithNetworkSegments(-1)},
		"no exclusive buffers": {weir.WithExclusiveBuffers(0)},
		"negative timeout":     {weir.WithBufferTimeout(-time.Second)},
		"too few segments":     {weir.WithNetworkSegments(2), weir.WithParallelism(4)},
	} {
		t.Run(name, func(t *testing.T) {
			env := weir.NewEnvironment(opts...)
			s := weir.FromGenerator(env, 10, func(i int64) int64 { return i })
			weir.Discard(s.Rebalance())
			_, err := env.Execute(testCtx(t))
			require.Error(t, err)
		})
	}
}

func TestMissingCodecIsAnError(t *testing.T) {
	type point struct{ X, Y int }
	env := weir.NewEnvironment(weir.WithParallelism(2))
	s := weir.Map(weir.FromGenerator(env, 10, func(i int64) int64 { return i }), func(v int64) point { return point{} })
	weir.Discard(s.Rebalance())
	_, err := env.Execute(testCtx(t))
	require.ErrorContains(t, err, "codec")
}

// Records far larger than a segment cross task boundaries intact.
func TestLargeRecordsSpanBuffers(t *testing.T) {
	forEachTransport(t, testLargeRecordsSpanBuffers)
}

func testLargeRecordsSpanBuffers(t *testing.T, tr weir.Option) {
	env := weir.NewEnvironment(tr, weir.WithParallelism(2), weir.WithSegmentSize(1024))
	s := weir.FromGenerator(env, 50, func(i int64) string {
		b := make([]byte, 10000+int(i)*97)
		for j := range b {
			b[j] = byte('a' + (int(i)+j)%26)
		}
		return string(b)
	})
	lens, _ := weir.Collect(weir.Map(s.Rebalance(), func(v string) int64 {
		for j := range v {
			if v[j] != byte('a'+(int(len(v)-10000)/97+j)%26) {
				return -1
			}
		}
		return int64(len(v))
	}))
	_, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	var want []int64
	for i := 0; i < 50; i++ {
		want = append(want, int64(10000+i*97))
	}
	require.Equal(t, want, sorted(lens.Values()))
}

func TestCancelStopsPromptly(t *testing.T) {
	forEachTransport(t, testCancelStopsPromptly)
}

func testCancelStopsPromptly(t *testing.T, tr weir.Option) {
	const par = 2
	env := weir.NewEnvironment(tr, weir.WithParallelism(par))
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	// The job is canceled from inside its source, once it runs at full
	// speed; promptness is counted in records: a source task checks its
	// context between batches of 64 polls (task's sourceBatch), so each
	// source subtask reads at most one more batch after the cancel.
	const cancelAt = 20000
	var canceled atomic.Bool
	var after atomic.Int64
	s := weir.FromGenerator(env, -1, func(i int64) int64 {
		if canceled.Load() {
			after.Add(1)
		}
		if i == cancelAt {
			cancel()
			canceled.Store(true)
		}
		return i
	})
	weir.Discard(weir.Map(s.Rebalance(), func(v int64) int64 { return v }))
	res, err := env.Execute(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, res.LeakedSegments)
	require.LessOrEqual(t, after.Load(), int64(par*64), "records read after the cancel")
}

// A sink 100x slower than its source: nothing is lost and the heap stays
// bounded by the network buffers, not the input size.
func TestSlowSinkBackPressureBoundsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	forEachTransport(t, testSlowSinkBackPressureBoundsMemory)
}

func testSlowSinkBackPressureBoundsMemory(t *testing.T, tr weir.Option) {
	const n = 40000
	const recSize = 4096 // 160 MB of input in all
	env := weir.NewEnvironment(tr, weir.WithParallelism(2), weir.WithNetworkSegments(256))
	src := weir.FromGenerator(env, n, func(i int64) []byte {
		b := make([]byte, recSize)
		b[0] = byte(i)
		return b
	})
	var count atomic.Int64
	var maxHeap atomic.Uint64
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	weir.SinkFunc(src.Rebalance(), func(v []byte) error {
		c := count.Add(1)
		// Far slower than the source (which only allocates and copies).
		spin := time.Now().Add(5 * time.Microsecond)
		for time.Now().Before(spin) {
		}
		if c%5000 == 0 {
			runtime.GC()
			metrics.Read(sample)
			if h := sample[0].Value.Uint64(); h > maxHeap.Load() {
				maxHeap.Store(h)
			}
		}
		return nil
	})
	res, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	require.EqualValues(t, n, count.Load())
	require.Zero(t, res.LeakedSegments)
	// 256 segments of 32 KiB = 8 MiB of network memory; allow slack for
	// the runtime, the test binary and the goroutines.
	require.Less(t, maxHeap.Load(), uint64(64<<20), "heap grew with the input (%d MB in)", n*recSize>>20)
	var bp time.Duration
	for _, m := range res.Tasks {
		bp += m.BackPressured
	}
	require.Positive(t, bp, "the producer never waited for the slow sink")
}

// A panic names the operator whose code panicked, also in a chain where
// user code resumes after emitting downstream (no recover per record: the
// task recovers, operators mark themselves running).
func TestPanicNamesOperatorInChain(t *testing.T) {
	type kase struct {
		name                    string
		flatMapAt, mapAt, keyAt int64 // value at which each panics (-1 never)
		want                    string
	}
	for _, c := range []kase{
		{"flat map after emitting", 300, -1, -1, "splitter"},
		{"map downstream of flat map", -1, 300, -1, "doubler"},
		{"process function after emitting", -1, -1, 300, "keeper"},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := weir.NewEnvironment(weir.WithParallelism(1))
			s := weir.FromGenerator(env, 10000, func(i int64) int64 { return i })
			f := weir.FlatMap(s, func(v int64, emit func(int64)) {
				emit(v)
				if v == c.flatMapAt {
					panic("flat map exploded")
				}
			}).Name("splitter")
			m := weir.Map(f, func(v int64) int64 {
				if v == c.mapAt {
					panic("map exploded")
				}
				return 2 * v
			}).Name("doubler")
			k := weir.Process(weir.KeyBy(m, func(v int64) int64 { return v % 7 }, codec.Int64()),
				func() weir.KeyedProcessFunction[int64, int64, int64] {
					return weir.ProcessFunc(nil, func(_ int64, v int64, out *weir.Collector[int64]) error {
						out.Emit(v)
						if v == 2*c.keyAt {
							panic("process exploded")
						}
						return nil
					})
				}).Name("keeper")
			weir.Discard(weir.Map(k, func(v int64) int64 { return v }).Name("after"))
			_, err := env.Execute(testCtx(t))
			var te *task.Error
			require.ErrorAs(t, err, &te)
			require.Equal(t, c.want, te.Operator, "%v", err)
			var pe *task.PanicError
			require.ErrorAs(t, err, &pe)
		})
	}
}
