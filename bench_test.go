package weir_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/cputime"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type kv struct{ K, V int64 }

var kvCodec = codec.Struct2(
	codec.Int64(), func(x kv) int64 { return x.K },
	codec.Int64(), func(x kv) int64 { return x.V },
	func(k, v int64) kv { return kv{k, v} })

// keyedSum builds source of (int64 key, int64 value) -> keyBy -> keyed sum
// -> discarding sink.
func keyedSum(env *weir.Environment, n int64) {
	src := weir.FromGenerator(env, n, func(i int64) kv { return kv{i & 1023, i} }).WithCodec(kvCodec)
	sums := weir.Reduce(weir.KeyBy(src, func(x kv) int64 { return x.K }, codec.Int64()),
		func(a, b kv) kv { return kv{a.K, a.V + b.V} })
	weir.Discard(sums)
}

// BenchmarkJobInProcess runs the keyed-sum job on the heap state backend
// (p=1, p=2) and on the pebble backend (backend=pebble/p=1, p=2).
// cpu-ns/op is the CPU time the process spent per record: on a machine
// shared with other work it varies far less than records/s, and it is
// what compares the backends' per-record cost.
func BenchmarkJobInProcess(b *testing.B) {
	benchmarkKeyedSum(b)
	b.Run("backend=pebble", func(b *testing.B) {
		benchmarkKeyedSum(b, weir.WithStateBackend(weir.PebbleBackend(weir.PebbleOptions{Dir: b.TempDir()})))
	})
}

// BenchmarkJobTCP is BenchmarkJobInProcess with every exchange over
// loopback TCP.
func BenchmarkJobTCP(b *testing.B) { benchmarkKeyedSum(b, weir.WithTCPExchanges(true)) }

func benchmarkKeyedSum(b *testing.B, opts ...weir.Option) {
	for _, p := range []int{1, 2} {
		b.Run(fmt.Sprintf("p=%d", p), func(b *testing.B) {
			b.ReportAllocs()
			env := weir.NewEnvironment(append([]weir.Option{weir.WithParallelism(p)}, opts...)...)
			keyedSum(env, int64(b.N))
			cpu := cputime.Process()
			if _, err := env.Execute(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkJobInProcessMetrics is BenchmarkJobInProcess/p=1 without and
// with the dashboard (its charts' ring buffer on) and the Prometheus
// endpoint, polled by a client every 100 ms while the job runs (the
// snapshot, the whole 10 minutes of the charts' series, the workers view
// with its runtime reading, and /metrics), and a metrics interval of
// 100 ms: what watching a job costs it. cpu-ns/op is the CPU time the whole process
// spent per record (the job, the sampler, the servers, the client).
func BenchmarkJobInProcessMetrics(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("p=1/metrics=%v", map[bool]string{false: "off", true: "on"}[on]), func(b *testing.B) {
			b.ReportAllocs()
			opts := []weir.Option{weir.WithParallelism(1)}
			if on {
				opts = append(opts, weir.WithDashboard("127.0.0.1:0"), weir.WithPrometheus("127.0.0.1:0"),
					weir.WithMetricsInterval(100*time.Millisecond))
			}
			env := weir.NewEnvironment(opts...)
			keyedSum(env, int64(b.N))
			cpu := cputime.Process()
			job, err := env.Start(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			done := make(chan struct{})
			var wg sync.WaitGroup
			if on {
				wg.Go(func() {
					d := "http://" + job.DashboardAddr()
					pollWhileRunning(done, d+"/api/v1/job", d+"/api/v1/history", d+"/taskmanagers",
						"http://"+job.PrometheusAddr()+"/metrics")
				})
			}
			_, err = job.Wait()
			close(done)
			wg.Wait()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(cputime.Process()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// pollWhileRunning gets each url every 100 ms until done is closed.
func pollWhileRunning(done <-chan struct{}, urls ...string) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	defer http.DefaultClient.CloseIdleConnections()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		for _, u := range urls {
			if resp, err := http.Get(u); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}
}

func BenchmarkCheckpointOverhead(b *testing.B) {
	for _, iv := range []time.Duration{0, 100 * time.Millisecond} {
		name := "interval=none"
		if iv > 0 {
			name = "interval=" + iv.String()
		}
		b.Run(name, func(b *testing.B) {
			opts := []weir.Option{weir.WithParallelism(1)}
			if iv > 0 {
				opts = append(opts, weir.WithCheckpointing(weir.CheckpointConfig{Interval: iv}))
			}
			env := weir.NewEnvironment(opts...)
			keyedSum(env, int64(b.N))
			res, err := env.Execute(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			if res.Checkpoints != nil {
				b.ReportMetric(float64(res.Checkpoints.Completed), "checkpoints")
			}
		})
	}
}

// BenchmarkBaselineChannels is the keyed sum of BenchmarkJobInProcess
// written by hand the way a Go program would without weir: a generator
// goroutine, a summing goroutine with a map, a discarding goroutine, typed
// channels of 1,024 values between them, one send per record. It is the
// yardstick for the per-record cost of the runtime (no checkpoints, no
// serialization, no flow control beyond the channels' capacity).
func BenchmarkBaselineChannels(b *testing.B) {
	b.ReportAllocs()
	in := make(chan kv, 1024)
	out := make(chan kv, 1024)
	done := make(chan int64)
	go func() {
		for i := range int64(b.N) {
			in <- kv{i & 1023, i}
		}
		close(in)
	}()
	go func() {
		sums := make(map[int64]int64, 1024)
		for x := range in {
			s := sums[x.K] + x.V
			sums[x.K] = s
			out <- kv{x.K, s}
		}
		close(out)
	}()
	go func() {
		var n int64
		for range out {
			n++
		}
		done <- n
	}()
	if n := <-done; n != int64(b.N) {
		b.Fatalf("%d results, want %d", n, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// slowSinkDelay makes the sink of BenchmarkCheckpointUnderBackpressure
// about 100 times slower than the rest of the job (which moves a record
// in about 0.2 µs on the reference machine): it takes 20 µs a record,
// paced by sleeping, so that the pace does not depend on the CPU left to
// it.
const slowSinkDelay = 20 * time.Microsecond

// BenchmarkCheckpointUnderBackpressure runs the keyed-sum job with a sink
// 100 times slower than its source, so that the exchange between them is
// full, and checkpoints it every 100 ms aligned, unaligned, and aligned
// with a 10 ms timeout. It reports the mean end-to-end duration of the
// completed checkpoints and the records per second through the sink.
func BenchmarkCheckpointUnderBackpressure(b *testing.B) {
	for _, m := range []struct {
		name string
		cfg  weir.CheckpointConfig
	}{
		{"aligned", weir.CheckpointConfig{Interval: 100 * time.Millisecond}},
		{"unaligned", weir.CheckpointConfig{Interval: 100 * time.Millisecond, Unaligned: true}},
		{"timeout-10ms", weir.CheckpointConfig{Interval: 100 * time.Millisecond, Unaligned: true, AlignedTimeout: 10 * time.Millisecond}},
	} {
		b.Run("mode="+m.name, func(b *testing.B) {
			cfg := m.cfg
			cfg.Timeout = time.Minute
			env := weir.NewEnvironment(weir.WithParallelism(1), weir.WithCheckpointing(cfg))
			src := weir.FromGenerator(env, int64(b.N), func(i int64) kv { return kv{i & 1023, i} }).WithCodec(kvCodec)
			sums := weir.Reduce(weir.KeyBy(src, func(x kv) int64 { return x.K }, codec.Int64()),
				func(a, c kv) kv { return kv{a.K, a.V + c.V} })
			var next time.Time
			n := 0
			weir.SinkFunc(sums, func(kv) error {
				if n++; n%64 != 0 {
					return nil
				}
				// 64 records per 64 × 20 µs, with no catching up after
				// a pause: a stall of the sink shows in records/s.
				now := time.Now()
				if next.Before(now) {
					next = now
				}
				next = next.Add(64 * slowSinkDelay)
				time.Sleep(next.Sub(now))
				return nil
			})
			job, err := env.Start(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			// Checkpoint durations, sampled before the history rolls over.
			durations := map[uint64]time.Duration{}
			sample := func() {
				for _, c := range job.CheckpointStats().History {
					if c.Status == coordinator.Completed {
						durations[uint64(c.ID)] = c.Duration
					}
				}
			}
			done := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				t := time.NewTicker(50 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-done:
						return
					case <-t.C:
						sample()
					}
				}
			})
			_, err = job.Wait()
			close(done)
			wg.Wait()
			if err != nil {
				b.Fatal(err)
			}
			sample()
			var total time.Duration
			for _, d := range durations {
				total += d
			}
			if n := len(durations); n > 0 {
				b.ReportMetric(float64(total.Milliseconds())/float64(n), "ms/checkpoint")
			}
			b.ReportMetric(float64(len(durations)), "checkpoints")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
