package joins_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/task"
	"github.com/weirstream/weir/weirtest"
)

// Bad joins are errors from Execute, naming the operator.
func TestJoinConfigErrors(t *testing.T) {
	key := func(e event) int64 { return e.Key }
	stamped := func(env *weir.Environment) *weir.Stream[event] {
		return side(env, "s", events(1, 10, 2, 1, 0), source{}, nil)
	}
	for _, tc := range []struct {
		name  string
		build func(env *weir.Environment)
		want  string
	}{
		{"lower above upper", func(env *weir.Environment) {
			l := weir.KeyBy(stamped(env), key, codec.Int64())
			weir.Discard(weir.IntervalJoin[int64](l, l).Between(time.Second, -time.Second).Process(func(a, b event) int64 { return 0 }))
		}, "lower bound 1s above upper bound -1s"},
		{"no bounds", func(env *weir.Environment) {
			l := weir.KeyBy(stamped(env), key, codec.Int64())
			weir.Discard(weir.IntervalJoin[int64](l, l).Process(func(a, b event) int64 { return 0 }))
		}, "needs its bounds"},
		{"no timestamps", func(env *weir.Environment) {
			src := weir.FromGenerator(env, 10, func(i int64) event { return event{Key: i} }).WithCodec(eventCodec)
			l := weir.KeyBy(src, key, codec.Int64())
			weir.Discard(weir.IntervalJoin[int64](l, weir.KeyBy(stamped(env), key, codec.Int64())).Between(0, time.Second).
				Process(func(a, b event) int64 { return 0 }))
		}, "both inputs need timestamps"},
		{"no codec", func(env *weir.Environment) {
			type point struct{ X int64 }
			p := weir.Map(stamped(env), func(e event) point { return point{e.Key} })
			l := weir.KeyBy(p, func(v point) int64 { return v.X }, codec.Int64())
			weir.Discard(weir.IntervalJoin[int64](l, l).Between(0, time.Second).Process(func(a, b point) int64 { return 0 }))
		}, "need codecs"},
		{"window join without EqualTo", func(env *weir.Environment) {
			weir.Discard(weir.Join[int64, int64](stamped(env), stamped(env)).Where(key).
				Window(weir.TumblingWindows(time.Second)).Apply(func(a, b event) int64 { return 0 }))
		}, "Where and EqualTo"},
		{"window join key without codec", func(env *weir.Environment) {
			type k struct{ A int64 }
			kf := func(e event) k { return k{e.Key} }
			weir.Discard(weir.Join[k, int64](stamped(env), stamped(env)).Where(kf).EqualTo(kf).
				Window(weir.TumblingWindows(time.Second)).Apply(func(a, b event) int64 { return 0 }))
		}, "KeyCodec"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := weir.NewEnvironment(weir.WithParallelism(2))
			tc.build(env)
			_, err := env.Execute(testCtx(t))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// A join function that panics fails its task like any other, naming the
// operator: the interval join's, the window join's.
func TestJoinFunctionPanicFailsTask(t *testing.T) {
	ls, rs := events(5, 500, 3, 2, 0), events(6, 500, 3, 2, 100000)
	key := func(e event) int64 { return e.Key }
	for _, op := range []string{"interval", "window"} {
		t.Run(op, func(t *testing.T) {
			env := weir.NewEnvironment(weir.WithParallelism(2))
			l, r := side(env, "left", ls, source{}, nil), side(env, "right", rs, source{}, nil)
			boom := func(a, b event) int64 {
				if a.V == ls[200].V {
					panic("join function panicked")
				}
				return 0
			}
			if op == "interval" {
				weir.Discard(weir.IntervalJoin[int64](weir.KeyBy(l, key, codec.Int64()), weir.KeyBy(r, key, codec.Int64())).
					Between(-time.Second, time.Second).Process(boom).Name("joiner"))
			} else {
				weir.Discard(weir.Join[int64, int64](l, r).Where(key).EqualTo(key).Window(weir.TumblingWindows(time.Second)).Apply(boom).Name("joiner"))
			}
			_, err := env.Execute(testCtx(t))
			var pe *task.PanicError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "join function panicked", pe.Value)
			var te *task.Error
			require.ErrorAs(t, err, &te)
			require.Equal(t, "joiner", te.Operator)
		})
	}
}

// lateReader emits evs, then, once the join's input watermark passed the
// late events (read from the job's metrics), the late ones.
type lateReader struct {
	evs, late []event
	i, j      int
	passed    func() bool
	timer     *time.Timer
	ready     chan struct{}
}

func (r *lateReader) Poll() (event, weir.ReadStatus, error) {
	if r.i < len(r.evs) {
		r.i++
		return r.evs[r.i-1], weir.Read, nil
	}
	if r.j == len(r.late) {
		return event{}, weir.EndOfInput, nil
	}
	if !r.passed() {
		return event{}, weir.NothingAvailable, nil
	}
	r.j++
	return r.late[r.j-1], weir.Read, nil
}

func (r *lateReader) Available() <-chan struct{} {
	if r.ready == nil {
		r.ready = make(chan struct{}, 1)
		r.timer = time.AfterFunc(time.Millisecond, func() {
			select {
			case r.ready <- struct{}{}:
			default:
			}
		})
	} else {
		r.timer.Reset(time.Millisecond)
	}
	return r.ready
}

func (r *lateReader) Close() error {
	if r.timer != nil {
		r.timer.Stop()
	}
	return nil
}

// Values behind the join's watermark are dropped, join nothing, and are
// counted (numLateRecordsDropped of the join's subtask).
func TestIntervalJoinCountsLateValues(t *testing.T) {
	ls, rs := events(7, 1000, 5, 2, 0), events(8, 1000, 5, 2, 100000)
	var late []event
	for i := range 10 {
		late = append(late, event{Key: int64(i % 5), TS: int64(i), V: -int64(i) - 1})
	}
	var job atomic.Pointer[weir.Job]
	passed := func() bool {
		j := job.Load()
		if j == nil {
			return false
		}
		for _, v := range j.Metrics().Vertices {
			if strings.HasPrefix(v.Name, "interval join") && len(v.Subtasks) == 1 && v.Subtasks[0].CurrentInputWatermark > 1000 {
				return true
			}
		}
		return false
	}
	env := weir.NewEnvironment(weir.WithParallelism(1), weir.WithBufferTimeout(time.Millisecond),
		weir.WithAutoWatermarkInterval(5*time.Millisecond), weir.WithMetricsInterval(10*time.Millisecond))
	l := side(env, "left", ls, source{}, nil)
	r := weir.AssignTimestamps(weir.FromPollingReader(env, "right", func(int, int) (weir.PollingReader[event], error) {
		return &lateReader{evs: rs, late: late, passed: passed}, nil
	}).WithCodec(eventCodec), weir.BoundedOutOfOrderness(disorder*time.Millisecond, func(e event) int64 { return e.TS }))
	key := func(e event) int64 { return e.Key }
	out := weir.IntervalJoin[pair](weir.KeyBy(l, key, codec.Int64()), weir.KeyBy(r, key, codec.Int64())).
		Between(-30*time.Millisecond, 30*time.Millisecond).Process(func(a, b event) pair { return pair{L: a.V, R: b.V} }).WithCodec(pairCodec)
	got, _ := weir.Collect(withTimestamp(out))
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	job.Store(j)
	_, err = j.Wait()
	require.NoError(t, err)
	require.Equal(t, batchInterval(ls, rs, -30, 30), sortPairs(got.Values()))
	var dropped int64
	for _, v := range j.Metrics().Vertices {
		if strings.HasPrefix(v.Name, "interval join") {
			dropped += v.Subtasks[0].NumLateRecordsDropped
		}
	}
	require.EqualValues(t, len(late), dropped)
}

// weirtest's fault plans over each join: the committed output is the
// fault-free run's.
func TestJoinsWeirtest(t *testing.T) {
	kinds := weirtest.Of(weirtest.TaskFailure, weirtest.SnapshotFailure, weirtest.SlowConsumer, weirtest.ConnReset, weirtest.ReadError)
	for _, op := range []string{"interval", "window", "cogroup"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			ls, rs := events(11, 1000, 7, 2, 0), events(12, 1000, 7, 2, 100000)
			weirtest.Run(t, weirtest.Config{Seeds: 2, TCP: op != "window", Kinds: kinds}, func(r *weirtest.R) {
				env := r.Env(weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond), weir.WithAutoWatermarkInterval(5*time.Millisecond))
				var out *weir.Stream[pair]
				switch op {
				case "interval":
					out = intervalJob(env, ls, rs, -20, 20, source{}, nil)
				case "window":
					out = windowJob(env, ls, rs, "tumbling", 40, 0, false, source{}, nil)
				default:
					out = windowJob(env, ls, rs, "sliding", 40, 20, true, source{}, nil)
				}
				weirtest.Collect(r, out, nil)
			})
		})
	}
}

// An interval join across processes (a coordinator and two workers, the
// data plane over TCP), with a task failure: the committed output of a
// file sink is the batch answer.
func TestIntervalJoinCluster(t *testing.T) {
	ls, rs := events(13, 3000, 11, 2, 0), events(14, 3000, 11, 2, 100000)
	outDir := filepath.Join(t.TempDir(), "out")
	var seen atomic.Int64
	build := func(env *weir.Environment) {
		maybe := func() {
			if seen.Add(1) == 1500 {
				panic("injected failure")
			}
		}
		out := intervalJob(env, ls, rs, -25, 15, source{}, maybe)
		weir.FileSink(out, outDir, func(p pair) []byte { return []byte(p.String()) })
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	opts := []weir.Option{weir.WithParallelism(2), weir.WithBufferTimeout(time.Millisecond), weir.WithAutoWatermarkInterval(5 * time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: t.TempDir()})}
	env := weir.NewEnvironment(append(opts, weir.WithCluster(weir.ClusterConfig{Listener: ln, Workers: 2, Token: "secret", WorkerTimeout: 20 * time.Second}))...)
	build(env)
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wenv := weir.NewEnvironment(opts...)
		build(wenv)
		wg.Go(func() {
			errs[i] = wenv.RunWorker(testCtx(t), weir.WorkerConfig{Coordinator: ln.Addr().String(), ID: fmt.Sprintf("w%d", i), Token: "secret"})
		})
	}
	res, err := job.Wait()
	wg.Wait()
	require.NoError(t, err)
	for _, werr := range errs {
		if werr != nil && !errors.Is(werr, context.Canceled) {
			t.Errorf("worker: %v", werr)
		}
	}
	require.GreaterOrEqual(t, res.Restarts, 1)
	var got []pair
	for _, l := range committedLines(t, outDir) {
		f := strings.Fields(l)
		require.Len(t, f, 3, "line %q", l)
		var p [3]int64
		for i := range p {
			p[i], _ = strconv.ParseInt(f[i], 10, 64)
		}
		got = append(got, pair{p[0], p[1], p[2]})
	}
	require.Equal(t, batchInterval(ls, rs, -25, 15), sortPairs(got))
}

// committedLines reads the lines of the committed files of a file sink.
func committedLines(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var lines []string
	for _, e := range entries {
		require.False(t, strings.HasSuffix(e.Name(), ".inprogress"), "uncommitted file %s left", e.Name())
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		lines = append(lines, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")...)
	}
	return slices.DeleteFunc(lines, func(s string) bool { return s == "" })
}
