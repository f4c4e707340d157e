package multiinput_test

import (
	"fmt"
	"math"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
)

// The three jobs of these tests, each checked against a batch computation
// of its input:
//
//   - union: two generators of different parallelism united, through a
//     hooked map, into a keyed running sum;
//   - cotimers: two timestamped streams of different speeds connected by
//     key into a keyed co-process function that sums each key's values per
//     100 ms of event time in map state and emits them from event-time
//     timers, plus one processing-time timer per key;
//   - broadcast: a keyed stream connected to a short broadcast stream of
//     rules (a factor in force from a timestamp on) that ends long before
//     it; the keyed side buffers each value in keyed state until its
//     event-time timer, which applies the factor in force at its
//     timestamp: every rule with a timestamp at or below it has arrived
//     by then, since the operator's watermark is the minimum of both
//     inputs'.
//
// hook runs once per value on a path of the job (the map after the union;
// both inputs and OnTimer of the co-process function; ProcessElement and
// OnTimer of the broadcast one): the kill tests make it panic.

type kv struct{ K, V int64 }

var kvCodec = codec.Struct2(codec.Int64(), func(x kv) int64 { return x.K }, codec.Int64(), func(x kv) int64 { return x.V },
	func(k, v int64) kv { return kv{k, v} })

// event is a timestamped value of a key.
type event struct{ K, TS, V int64 }

var eventCodec = codec.Struct3(codec.Int64(), func(e event) int64 { return e.K }, codec.Int64(), func(e event) int64 { return e.TS },
	codec.Int64(), func(e event) int64 { return e.V }, func(k, ts, v int64) event { return event{k, ts, v} })

// jobSpec is one job of the tests: build adds it to env, with hook on its
// path and its sources generating speed times their usual rate, and
// returns its output stream; want is the batch answer. Outputs are
// multisets of lines.
type jobSpec struct {
	name  string
	build func(env *weir.Environment, hook func(), speed float64) *weir.Stream[string]
	want  func() []string
}

// collect builds job on env and returns what reads its collected output
// once the job is over.
func collect(job jobSpec, env *weir.Environment, hook func(), speed float64) func() []string {
	got, _ := weir.Collect(job.build(env, hook, speed))
	return got.Values
}

var jobs = []jobSpec{unionJob, coTimersJob, broadcastJob}

// rate is the usual rate of the jobs' sources, per second and thousand
// values of their input: each input takes about half a second, so that
// checkpoints and kills fall inside the job whatever the machine, and the
// queues between the tasks stay short (barriers are not held up behind
// the whole input).
func rate(n int64, speed float64) weir.GeneratorOption {
	return weir.Rate(2 * float64(n) * speed)
}

const (
	unionA, unionB = 6000, 3000
	unionKeys      = 13
)

// unionJob counts and sums each key's values in keyed state and emits
// "key count sum" from an event-time timer at the end of event time (the
// watermark every source sends when it ends).
var unionJob = jobSpec{
	name: "union",
	build: func(env *weir.Environment, hook func(), speed float64) *weir.Stream[string] {
		a := weir.FromGenerator(env, unionA, func(i int64) kv { return kv{i % unionKeys, i} }, rate(unionA, speed)).WithCodec(kvCodec).Parallelism(2)
		b := weir.FromGenerator(env, unionB, func(i int64) kv { return kv{i % unionKeys, 1_000_000 + i} }, rate(unionB, speed)).WithCodec(kvCodec).Parallelism(1)
		u := weir.Map(weir.Union(a, b), func(v kv) kv { hook(); return v }).Name("hook").WithCodec(kvCodec)
		return weir.Process(weir.KeyBy(u, func(v kv) int64 { return v.K }, codec.Int64()), func() weir.KeyedProcessFunction[int64, kv, string] {
			return &countSum{}
		}).UID("sum")
	},
	want: func() []string {
		count, sum := map[int64]int64{}, map[int64]int64{}
		for i := range int64(unionA) {
			count[i%unionKeys]++
			sum[i%unionKeys] += i
		}
		for i := range int64(unionB) {
			count[i%unionKeys]++
			sum[i%unionKeys] += 1_000_000 + i
		}
		return lines(count, sum)
	},
}

// countSum is unionJob's function.
type countSum struct {
	rc  *weir.RuntimeContext
	acc *state.ValueState[kv] // (count, sum)
}

func (f *countSum) Open(rc *weir.RuntimeContext) (err error) {
	f.rc = rc
	f.acc, err = weir.ValueState(rc, "acc", kvCodec)
	return err
}

func (f *countSum) ProcessElement(_ int64, v kv, _ *weir.Collector[string]) error {
	a, err := f.acc.Value()
	if err != nil {
		return err
	}
	if err := f.acc.Update(kv{a.K + 1, a.V + v.V}); err != nil {
		return err
	}
	return f.rc.Timers().RegisterEventTimeTimer(math.MaxInt64)
}

func (f *countSum) OnTimer(key, _ int64, _ weir.TimeDomain, out *weir.Collector[string]) error {
	a, err := f.acc.Value()
	if err != nil {
		return err
	}
	out.Emit(fmt.Sprintf("%d %d %d", key, a.K, a.V))
	return nil
}

func lines(count, v map[int64]int64) []string {
	var out []string
	for k := range count {
		out = append(out, fmt.Sprintf("%d %d %d", k, count[k], v[k]))
	}
	return out
}

const (
	coA, coB = 6000, 3000
	coKeys   = 11
	coWindow = 100
)

// stamped gives the events of a generator of parallelism p their
// timestamps and watermarks, at the same parallelism: chained to the
// generator, each subtask's timestamps rise (also after a restore at
// another job parallelism, which does not move the generator).
func stamped(s *weir.Stream[event], p int) *weir.Stream[event] {
	return weir.AssignTimestamps(s.Parallelism(p), weir.MonotonousTimestamps(func(e event) int64 { return e.TS })).Parallelism(p)
}

// coTimersJob: A's events (ts i) and B's (ts 2i, so B runs ahead in event
// time and A holds the operator's watermark back) by key; per key and
// window of 100 ms of event time, the sum of A's values and the count of
// B's, emitted by the window's event-time timer as "key window sumA
// countB"; and "key marker" once per key from a processing-time timer set
// by its first value.
var coTimersJob = jobSpec{
	name: "cotimers",
	build: func(env *weir.Environment, hook func(), speed float64) *weir.Stream[string] {
		a := stamped(weir.FromGenerator(env, coA, func(i int64) event { return event{i % coKeys, i, i} }, rate(coA, speed)).WithCodec(eventCodec), 2)
		b := stamped(weir.FromGenerator(env, coB, func(i int64) event { return event{i % coKeys, 2 * i, 1} }, rate(coB, speed)).WithCodec(eventCodec), 1)
		key := func(e event) int64 { return e.K }
		c := weir.ConnectKeyed(weir.KeyBy(a, key, codec.Int64()), weir.KeyBy(b, key, codec.Int64()))
		return weir.KeyedCoProcess(c, func() weir.KeyedCoProcessFunction[int64, event, event, string] {
			return &windowSums{hook: hook}
		}).UID("cotimers")
	},
	want: func() []string {
		type kw struct{ k, w int64 }
		sumA, countB := map[kw]int64{}, map[kw]int64{}
		for i := range int64(coA) {
			sumA[kw{i % coKeys, windowOf(i)}] += i
		}
		for i := range int64(coB) {
			countB[kw{i % coKeys, windowOf(2 * i)}]++
		}
		seen := map[kw]bool{}
		var out []string
		for _, m := range []map[kw]int64{sumA, countB} {
			for x := range m {
				if !seen[x] {
					seen[x] = true
					out = append(out, fmt.Sprintf("%d %d %d %d", x.k, x.w, sumA[x], countB[x]))
				}
			}
		}
		for k := range int64(coKeys) {
			out = append(out, fmt.Sprintf("%d marker", k))
		}
		return out
	},
}

// windowOf is the end of the window of ts, its timer's time.
func windowOf(ts int64) int64 { return ts/coWindow*coWindow + coWindow - 1 }

// windowSums is coTimersJob's function.
type windowSums struct {
	hook   func()
	rc     *weir.RuntimeContext
	sums   *state.MapState[int64, kv] // window → (sum of A, count of B)
	marked *state.ValueState[bool]
}

func (f *windowSums) Open(rc *weir.RuntimeContext) (err error) {
	f.rc = rc
	if f.sums, err = weir.MapState(rc, "sums", codec.Int64(), kvCodec); err != nil {
		return err
	}
	f.marked, err = weir.ValueState(rc, "marked", codec.Bool())
	return err
}

func (f *windowSums) add(e event, a, b int64) error {
	f.hook()
	w := windowOf(e.TS)
	s, _, err := f.sums.Get(w)
	if err != nil {
		return err
	}
	if err := f.sums.Put(w, kv{s.K + a, s.V + b}); err != nil {
		return err
	}
	if err := f.rc.Timers().RegisterEventTimeTimer(w); err != nil {
		return err
	}
	if marked, err := f.marked.Value(); err != nil || marked {
		return err
	}
	if err := f.marked.Update(true); err != nil {
		return err
	}
	return f.rc.Timers().RegisterProcessingTimeTimer(f.rc.Timers().CurrentProcessingTime() + 1)
}

func (f *windowSums) ProcessElement1(_ int64, e event, _ *weir.Collector[string]) error {
	return f.add(e, e.V, 0)
}
func (f *windowSums) ProcessElement2(_ int64, e event, _ *weir.Collector[string]) error {
	return f.add(e, 0, 1)
}

func (f *windowSums) OnTimer(key, ts int64, d weir.TimeDomain, out *weir.Collector[string]) error {
	f.hook()
	if d == weir.ProcessingTime {
		out.Emit(fmt.Sprintf("%d marker", key))
		return nil
	}
	s, _, err := f.sums.Get(ts)
	if err != nil {
		return err
	}
	out.Emit(fmt.Sprintf("%d %d %d %d", key, ts, s.K, s.V))
	return f.sums.Remove(ts)
}

const (
	bcEvents = 8000
	bcRules  = 20
	bcKeys   = 7
)

// factors is the broadcast job's broadcast state: rule timestamp → factor.
var factors = weir.MapStateDescriptor[int64, int64]{Name: "factors"}

// factorAt is the factor in force at ts: rule j, from timestamp
// j*bcEvents/bcRules on, is j+1.
func factorAt(ts int64) int64 { return ts/(bcEvents/bcRules) + 1 }

// broadcastJob emits "key ts value*factor" for every event.
var broadcastJob = jobSpec{
	name: "broadcast",
	build: func(env *weir.Environment, hook func(), speed float64) *weir.Stream[string] {
		events := stamped(weir.FromGenerator(env, bcEvents, func(i int64) event { return event{i % bcKeys, i, i} }, rate(bcEvents, speed)).WithCodec(eventCodec), 2)
		rules := stamped(weir.FromGenerator(env, bcRules, func(j int64) event { return event{0, j * bcEvents / bcRules, j + 1} }).WithCodec(eventCodec), 1)
		return weir.KeyedBroadcastProcess(weir.KeyBy(events, func(e event) int64 { return e.K }, codec.Int64()), weir.Broadcast(rules, factors),
			func() weir.KeyedBroadcastProcessFunction[int64, event, event, string] {
				return &applyFactor{hook: hook}
			}).UID("broadcast")
	},
	want: func() []string {
		var out []string
		for i := range int64(bcEvents) {
			out = append(out, fmt.Sprintf("%d %d %d", i%bcKeys, i, i*factorAt(i)))
		}
		return out
	},
}

// applyFactor is broadcastJob's function.
type applyFactor struct {
	hook    func()
	rc      *weir.RuntimeContext
	factors *weir.BroadcastMap[int64, int64]
	pending *state.MapState[int64, int64] // ts → value
}

func (f *applyFactor) Open(rc *weir.RuntimeContext) (err error) {
	f.rc = rc
	if f.factors, err = weir.GetBroadcastState(rc, factors); err != nil {
		return err
	}
	f.pending, err = weir.MapState(rc, "pending", codec.Int64(), codec.Int64())
	return err
}

func (f *applyFactor) ProcessElement(_ int64, e event, _ *weir.Collector[string]) error {
	f.hook()
	if err := f.factors.Put(e.TS, 0); err != weir.ErrBroadcastStateReadOnly {
		return fmt.Errorf("a write of the keyed side: %v, want ErrBroadcastStateReadOnly", err)
	}
	if err := f.pending.Put(e.TS, e.V); err != nil {
		return err
	}
	return f.rc.Timers().RegisterEventTimeTimer(e.TS)
}

func (f *applyFactor) ProcessBroadcastElement(r event, ctx *weir.BroadcastContext[int64], _ *weir.Collector[string]) error {
	if err := f.rc.Timers().RegisterEventTimeTimer(r.TS); err != weir.ErrNoCurrentKey {
		return fmt.Errorf("a timer of the broadcast side: %v, want ErrNoCurrentKey", err)
	}
	// Every key with pending values is reachable from here.
	if err := ctx.ApplyToKeyedState("pending", func(key int64) error {
		if key < 0 || key >= bcKeys {
			return fmt.Errorf("ApplyToKeyedState: key %d", key)
		}
		return nil
	}); err != nil {
		return err
	}
	return f.factors.Put(r.TS, r.V)
}

func (f *applyFactor) OnTimer(key, ts int64, _ weir.TimeDomain, out *weir.Collector[string]) error {
	f.hook()
	v, ok, err := f.pending.Get(ts)
	if err != nil || !ok {
		return fmt.Errorf("timer %d of key %d without a pending value (%v)", ts, key, err)
	}
	// The rule in force is the latest from at or before ts, whatever
	// the order All gives (that of the encoded keys, which is not the
	// numeric order of every int64).
	factor, latest := int64(0), int64(math.MinInt64)
	for from, x := range f.factors.All() {
		if from <= ts && from >= latest {
			factor, latest = x, from
		}
	}
	out.Emit(fmt.Sprintf("%d %d %d", key, ts, v*factor))
	return f.pending.Remove(ts)
}
