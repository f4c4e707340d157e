// Command dashboard runs an unbounded job and serves its web dashboard
// while it runs: sensors report readings at a fixed rate, and the job
// prints each sensor's average over tumbling event-time windows as each
// window closes. With a logger it also logs a progress line every few
// seconds. Ctrl-C stops it cleanly.
//
// With -slow the printing sink takes that long per window result; it
// holds the job back once results come faster than it prints them:
// 8 sensors with 10 ms windows make 800 results a second, and at 20 ms
// each the sink prints 50. Within seconds the windows and the sources
// wait for buffers most of the time, and the dashboard shows them
// back-pressured (dark grey, "high") and the sink busy (red).
//
//	go run ./examples/dashboard                        # http://127.0.0.1:8081
//	go run ./examples/dashboard -window 10ms -slow 20ms  # a sink that cannot keep up: back pressure
//	go run ./examples/dashboard -prometheus :9249      # /metrics for Prometheus too
//	go run ./examples/dashboard -dashboard 0.0.0.0:8081 -token s3cret
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
)

// Reading is one measurement of a sensor at event time TS (unix ms).
type Reading struct {
	Sensor int64
	TS     int64
	Value  float64
}

var readingCodec = codec.Struct3(
	codec.Int64(), func(r Reading) int64 { return r.Sensor },
	codec.Int64(), func(r Reading) int64 { return r.TS },
	codec.Float64(), func(r Reading) float64 { return r.Value },
	func(s, ts int64, v float64) Reading { return Reading{s, ts, v} },
)

// mean accumulates an average.
type mean struct {
	Sum float64
	N   int64
}

var meanCodec = codec.Struct2(
	codec.Float64(), func(m mean) float64 { return m.Sum },
	codec.Int64(), func(m mean) int64 { return m.N },
	func(s float64, n int64) mean { return mean{s, n} },
)

// config is the command line.
type config struct {
	dashboard, prometheus, token string
	rate                         float64
	sensors, parallelism         int
	window, slow, progress       time.Duration
	quiet                        bool
	// metricsInterval is how often the job samples its metrics (0: the
	// default, 1 s).
	metricsInterval time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.dashboard, "dashboard", "127.0.0.1:8081", "serve the dashboard on this address (\"\": off)")
	flag.StringVar(&c.prometheus, "prometheus", "", "serve /metrics for Prometheus on this address (\"\": off)")
	flag.StringVar(&c.token, "token", "", "require this token from the dashboard's clients")
	flag.Float64Var(&c.rate, "rate", 20000, "readings per second, all sensors together")
	flag.IntVar(&c.sensors, "sensors", 8, "number of sensors")
	flag.IntVar(&c.parallelism, "p", 2, "parallelism")
	flag.DurationVar(&c.window, "window", time.Second, "window size")
	flag.DurationVar(&c.slow, "slow", 0, "time the printing sink takes per window result (makes it back-pressure the job)")
	flag.DurationVar(&c.progress, "progress", 5*time.Second, "progress line interval (0: off)")
	flag.BoolVar(&c.quiet, "quiet", false, "do not print the windows")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	log := logger()
	defer func() { _ = log.Sync() }()
	out := io.Writer(os.Stdout)
	if c.quiet {
		out = io.Discard
	}
	if err := run(ctx, c, log, out, nil); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}

// logger logs at info level to stderr, one line per entry.
func logger() *zap.Logger {
	cfg := zap.NewDevelopmentConfig()
	cfg.Level = zap.NewAtomicLevelAt(zap.InfoLevel)
	cfg.DisableStacktrace = true
	cfg.DisableCaller = true
	cfg.EncoderConfig.EncodeLevel = zapcore.CapitalLevelEncoder
	l, err := cfg.Build()
	if err != nil {
		return zap.NewNop()
	}
	return l
}

// run runs the job until ctx ends (then it returns nil). started, if set,
// gets the running job.
func run(ctx context.Context, c config, log *zap.Logger, out io.Writer, started func(*weir.Job)) error {
	if c.rate <= 0 || c.sensors <= 0 {
		return errors.New("-rate and -sensors must be positive")
	}
	opts := []weir.Option{
		weir.WithJobName("sensors"),
		weir.WithParallelism(c.parallelism),
		weir.WithLogger(log),
		weir.WithProgressInterval(c.progress),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 2 * time.Second}),
	}
	var httpOpts []weir.HTTPOption
	if c.token != "" {
		httpOpts = append(httpOpts, weir.AccessToken(c.token))
	}
	if c.dashboard != "" {
		opts = append(opts, weir.WithDashboard(c.dashboard, httpOpts...))
	}
	if c.prometheus != "" {
		opts = append(opts, weir.WithPrometheus(c.prometheus, httpOpts...))
	}
	if c.metricsInterval > 0 {
		opts = append(opts, weir.WithMetricsInterval(c.metricsInterval))
	}
	env := weir.NewEnvironment(opts...)

	// Event time follows the readings' index: every sensor reports once
	// per sensors/rate seconds, from the job's start on; a replay after a
	// restart produces the same readings.
	start := time.Now().UnixMilli()
	step := 1000 / c.rate // ms between two readings
	sensors := int64(c.sensors)
	readings := weir.FromGenerator(env, -1, func(i int64) Reading {
		s := i % sensors
		ts := start + int64(float64(i)*step)
		v := 20 + 5*math.Sin(float64(ts)/10000+float64(s)) + float64(i%7)/10
		return Reading{Sensor: s, TS: ts, Value: v}
	}, weir.Rate(c.rate)).WithCodec(readingCodec).Name("sensors")
	stamped := weir.AssignTimestamps(readings, weir.BoundedOutOfOrderness(100*time.Millisecond, func(r Reading) int64 { return r.TS }))
	bySensor := weir.KeyBy(stamped, func(r Reading) int64 { return r.Sensor }, codec.Int64())
	averages := weir.WindowAggregate(weir.Window(bySensor, weir.TumblingWindows(c.window)), weir.AggregateFunction[Reading, mean, float64]{
		Codec:  meanCodec,
		New:    func() mean { return mean{} },
		Add:    func(m mean, r Reading) mean { return mean{m.Sum + r.Value, m.N + 1} },
		Merge:  func(a, b mean) mean { return mean{a.Sum + b.Sum, a.N + b.N} },
		Result: func(m mean) float64 { return m.Sum / float64(max(m.N, 1)) },
	}, nil)
	weir.SinkFunc(averages, func(w weir.Windowed[int64, float64]) error {
		if c.slow > 0 {
			time.Sleep(c.slow)
		}
		_, err := fmt.Fprintf(out, "sensor %d  %s–%s  average %.2f\n", w.Key,
			time.UnixMilli(w.Window.Start).Format("15:04:05.000"), time.UnixMilli(w.Window.End).Format("15:04:05.000"), w.Value)
		return err
	}).Name("print").Parallelism(1)

	job, err := env.Start(ctx)
	if err != nil {
		return err
	}
	if addr := job.DashboardAddr(); addr != "" {
		log.Info("dashboard: http://" + addr + "/" + tokenFragment(c.token))
	}
	if addr := job.PrometheusAddr(); addr != "" {
		log.Info("prometheus: http://" + addr + "/metrics")
	}
	if started != nil {
		started(job)
	}
	_, err = job.Wait()
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		log.Info("stopped")
		return nil
	}
	return err
}

func tokenFragment(token string) string {
	if token == "" {
		return ""
	}
	return "#token=" + token
}
