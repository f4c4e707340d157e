// Command sensors runs until interrupted: readings of many sensors, with
// event timestamps slightly out of order, averaged per sensor over
// tumbling event-time windows; each window prints as it closes. Ctrl-C
// stops it cleanly (the job is canceled and every goroutine ends).
//
//	go run ./examples/sensors
//	go run ./examples/sensors -sensors 5 -window 2s -rate 2000
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
)

// reading is one measurement of a sensor at an event time (unix ms).
type reading struct {
	Sensor int64
	TS     int64
	Value  float64
}

var readingCodec = codec.Struct3(codec.Int64(), func(r reading) int64 { return r.Sensor },
	codec.Int64(), func(r reading) int64 { return r.TS },
	codec.Float64(), func(r reading) float64 { return r.Value },
	func(s, ts int64, v float64) reading { return reading{s, ts, v} })

// avg accumulates a mean.
type avg struct {
	Sum   float64
	Count int64
}

var avgCodec = codec.Struct2(codec.Float64(), func(a avg) float64 { return a.Sum },
	codec.Int64(), func(a avg) int64 { return a.Count },
	func(s float64, n int64) avg { return avg{s, n} })

func main() {
	sensors := flag.Int("sensors", 8, "sensors")
	size := flag.Duration("window", time.Second, "window length")
	rate := flag.Float64("rate", 4000, "readings per second")
	verbose := flag.Bool("v", false, "log the job's progress")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	log := zap.NewNop()
	if *verbose {
		log, _ = zap.NewDevelopment()
	}
	start := time.Now()
	opts := []weir.Option{weir.WithParallelism(2), weir.WithLogger(log),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 5 * time.Second})}
	env := weir.NewEnvironment(opts...)

	// An endless, rate-limited stream of readings: each sensor drifts
	// around its own level; timestamps lag the clock by up to 200 ms.
	src := weir.FromGenerator(env, -1, func(i int64) reading {
		r := rand.New(rand.NewPCG(uint64(i), 1))
		s := i % int64(*sensors)
		ts := start.UnixMilli() + int64(float64(i)/(*rate)*1000) - r.Int64N(200)
		return reading{Sensor: s, TS: ts, Value: 20 + float64(s) + 3*math.Sin(float64(ts)/5000) + r.NormFloat64()}
	}, weir.Rate(*rate)).WithCodec(readingCodec)
	stamped := weir.AssignTimestamps(src, weir.BoundedOutOfOrderness(200*time.Millisecond, func(r reading) int64 { return r.TS }))
	perSensor := weir.KeyBy(stamped, func(r reading) int64 { return r.Sensor }, codec.Int64())
	means := weir.WindowAggregate(weir.Window(perSensor, weir.TumblingWindows(*size)), weir.AggregateFunction[reading, avg, float64]{
		Codec:  avgCodec,
		New:    func() avg { return avg{} },
		Add:    func(a avg, r reading) avg { return avg{a.Sum + r.Value, a.Count + 1} },
		Result: func(a avg) float64 { return a.Sum / float64(a.Count) },
	}, nil)
	var windows atomic.Int64
	weir.SinkFunc(means, func(w weir.Windowed[int64, float64]) error {
		windows.Add(1)
		fmt.Printf("sensor %2d  %s  mean %6.2f\n", w.Key, time.UnixMilli(w.Window.Start).Format("15:04:05.000"), w.Value)
		return nil
	}).Parallelism(1)

	fmt.Println("averaging readings per sensor; Ctrl-C to stop")
	job, err := env.Start(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sensors:", err)
		os.Exit(1)
	}
	res, err := job.Wait()
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "sensors:", err)
		os.Exit(1)
	}
	fmt.Printf("stopped after %v: %s, %s\n", res.Duration.Round(time.Millisecond), count(windows.Load(), "window"),
		count(res.Checkpoints.Completed, "checkpoint"))
}

// count is n and word, in the plural unless n is 1 ("1 restart", "2
// restarts").
func count[N int | int64](n N, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
