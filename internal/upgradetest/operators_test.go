package upgradetest_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
)

// The upgrades of TestUpgrades, for the other stateful operators: event
// time windows (tumbling and session), an interval join, async I/O and a
// keyed co-process function, each given UID "op" (or none) between a generator
// (two for the two-input ones) and an exactly-once file sink.

// opSpec is one version of such a job.
type opSpec struct {
	uids     bool
	par      int  // the job's parallelism (0: 2)
	inserted bool // a stateless map inserted before the operator
	changed  bool // the operator's state of another type (its input's codec, or its own state's)
	removed  bool // without the operator: its input goes to the sink as "r,key,value" lines
}

// opFamily builds the operator of a family on its inputs (left, and right
// for two-input ones), writing lines; changed as in opSpec.
type opFamily struct {
	name   string
	two    bool                // a second input
	ts     func(i int64) int64 // the event timestamp of value i
	op     func(left, right *weir.Stream[rec], changed bool, uid string) *weir.Stream[string]
	errHas string // a state-type change's error names this
}

const opN, opAt = 3000, 1000

var jsonRec = codec.JSON[rec]()

func byKey(s *weir.Stream[rec]) *weir.KeyedStream[rec, int64] {
	return weir.KeyBy(s, key, codec.Int64())
}

// retyped is s under v2's codec when changed: the operators that keep
// their input in state then find it of another type.
func retyped(s *weir.Stream[rec], changed bool) *weir.Stream[rec] {
	if changed {
		return weir.Map(s, func(r rec) rec { return r }).WithCodec(jsonRec).Parallelism(1)
	}
	return s
}

func sumRecs(a, v rec) rec { return rec{a[0], a[1] + v[1]} }

func windowLine(w weir.Windowed[int64, rec]) string {
	return fmt.Sprintf("%d,%d,%d", w.Key, w.Window.Start, w.Value[1])
}

// sums1and2 keeps a running sum per key of each input; changed keeps
// input 1's as a string.
type sums1and2 struct {
	changed bool
	s1      interface {
		Value() (int64, error)
		Update(int64) error
	}
	s1s interface {
		Value() (string, error)
		Update(string) error
	}
	s2 interface {
		Value() (int64, error)
		Update(int64) error
	}
}

func (f *sums1and2) Open(c *weir.RuntimeContext) (err error) {
	if f.changed {
		f.s1s, err = weir.ValueState(c, "sum1", codec.String())
	} else {
		f.s1, err = weir.ValueState(c, "sum1", codec.Int64())
	}
	if err == nil {
		f.s2, err = weir.ValueState(c, "sum2", codec.Int64())
	}
	return err
}

func (f *sums1and2) ProcessElement1(k int64, r rec, out *weir.Collector[string]) error {
	var sum int64
	if f.changed {
		s, err := f.s1s.Value()
		if err != nil {
			return err
		}
		old, _ := strconv.ParseInt(s, 10, 64)
		sum = old + r[1]
		if err := f.s1s.Update(strconv.FormatInt(sum, 10)); err != nil {
			return err
		}
	} else {
		old, err := f.s1.Value()
		if err != nil {
			return err
		}
		sum = old + r[1]
		if err := f.s1.Update(sum); err != nil {
			return err
		}
	}
	out.Emit(fmt.Sprintf("1,%d,%d", k, sum))
	return nil
}

func (f *sums1and2) ProcessElement2(k int64, r rec, out *weir.Collector[string]) error {
	old, err := f.s2.Value()
	if err != nil {
		return err
	}
	out.Emit(fmt.Sprintf("2,%d,%d", k, old+r[1]))
	return f.s2.Update(old + r[1])
}

var opFamilies = []opFamily{
	{name: "tumbling window", ts: func(i int64) int64 { return i },
		op: func(l, _ *weir.Stream[rec], changed bool, uid string) *weir.Stream[string] {
			w := weir.WindowReduce(weir.Window(byKey(retyped(l, changed)), weir.TumblingWindows(100*time.Millisecond)), sumRecs)
			return weir.Map(w.UID(uid), windowLine)
		}, errHas: "json[[2]int64]"},
	// Bursts of 50 values 50 ms apart: one session per burst and key.
	{name: "session window", ts: func(i int64) int64 { return i/50*100 + i%50 },
		op: func(l, _ *weir.Stream[rec], changed bool, uid string) *weir.Stream[string] {
			w := weir.WindowReduce(weir.Window(byKey(retyped(l, changed)), weir.SessionWindows(20*time.Millisecond)), sumRecs)
			return weir.Map(w.UID(uid), windowLine)
		}, errHas: "json[[2]int64]"},
	{name: "interval join", two: true, ts: func(i int64) int64 { return i },
		op: func(l, r *weir.Stream[rec], changed bool, uid string) *weir.Stream[string] {
			return weir.IntervalJoin[string](byKey(retyped(l, changed)), byKey(r)).Between(-10*time.Millisecond, 10*time.Millisecond).
				Process(func(a, b rec) string { return fmt.Sprintf("%d,%d,%d", a[0], a[1], b[1]) }).UID(uid)
		}, errHas: "json[[2]int64]"},
	{name: "async I/O", ts: func(i int64) int64 { return i },
		op: func(l, _ *weir.Stream[rec], changed bool, uid string) *weir.Stream[string] {
			return weir.AsyncMap(retyped(l, changed), func(_ context.Context, r rec) (string, error) {
				return fmt.Sprintf("%d,%d", r[0], r[1]), nil
			}, weir.AsyncOptions{Capacity: 20}).UID(uid)
		}, errHas: "async-element(json[[2]int64])"},
	{name: "keyed co-process", two: true, ts: func(i int64) int64 { return i },
		op: func(l, r *weir.Stream[rec], changed bool, uid string) *weir.Stream[string] {
			return weir.KeyedCoProcess(weir.ConnectKeyed(byKey(l), byKey(r)), func() weir.KeyedCoProcessFunction[int64, rec, rec, string] {
				return &sums1and2{changed: changed}
			}).UID(uid)
		}, errHas: `state "sum1" restored from the checkpoint as value of int64, declared now as value of string`},
}

func (f opFamily) version(sp opSpec) version {
	par := sp.par
	if par == 0 {
		par = 2
	}
	return version{opts: []weir.Option{weir.WithParallelism(par)}, build: func(env *weir.Environment, out string, th *throttle) {
		input := func(uid string, n int64, value func(i int64) int64) *weir.Stream[rec] {
			src := weir.FromGenerator(env, n, func(i int64) rec { return rec{i % keys, value(i)} }).WithCodec(recCodec).Parallelism(1)
			if sp.uids {
				src.UID(uid)
			}
			ts := f.ts
			s := weir.AssignTimestamps(src, weir.MonotonousTimestamps(func(r rec) int64 { return ts(r[1] / 1000) })).Parallelism(1)
			if sp.uids {
				s.UID(uid + "-timestamps")
			}
			s = throttled(s, th).WithCodec(recCodec)
			if sp.inserted {
				s = weir.Map(s, func(r rec) rec { return r }).WithCodec(recCodec).Parallelism(1)
			}
			return s
		}
		// Values are i*1000 (+1 on the right), so that timestamps come
		// from i and the two inputs' lines differ.
		left := input("left", opN, func(i int64) int64 { return i * 1000 })
		var right *weir.Stream[rec]
		if f.two {
			right = input("right", opN/2, func(i int64) int64 { return i*1000 + 1 })
		}
		var lines *weir.Stream[string]
		if sp.removed {
			lines = weir.Map(left, func(r rec) string { return fmt.Sprintf("r,%d,%d", r[0], r[1]) })
			if right != nil {
				lines = weir.Union(lines, weir.Map(right, func(r rec) string { return fmt.Sprintf("r,%d,%d", r[0], r[1]) }))
			}
		} else {
			uid := ""
			if sp.uids {
				uid = "op"
			}
			lines = f.op(left, right, sp.changed, uid)
		}
		sink := weir.FileSink(lines, out, func(s string) []byte { return []byte(s) })
		if sp.uids {
			sink.UID("sink")
		}
	}}
}

// Every family through the upgrades, from a savepoint of StopWithSavepoint
// and from one of TriggerSavepoint and a cancel: the output of both
// versions together is the output of an uninterrupted run, or v2 fails to
// start with the error that says why.
func TestOperatorUpgrades(t *testing.T) {
	type upgrade struct {
		name    string
		v1, v2  opSpec
		wantErr error
		errHas  string
	}
	for _, f := range opFamilies {
		upgrades := []upgrade{
			{name: "unchanged", v1: opSpec{uids: true}, v2: opSpec{uids: true}},
			{name: "rescaled", v1: opSpec{uids: true}, v2: opSpec{uids: true, par: 3}},
			{name: "unchanged without UIDs", v2: opSpec{}},
			{name: "rescaled without UIDs", v2: opSpec{par: 1}},
			{name: "without UIDs, a map inserted before it", v2: opSpec{inserted: true}, wantErr: weir.ErrNonRestoredState, errHas: "Set UIDs"},
			{name: "a map inserted before it", v1: opSpec{uids: true}, v2: opSpec{uids: true, inserted: true}},
			{name: "its state's type changed", v1: opSpec{uids: true}, v2: opSpec{uids: true, changed: true},
				wantErr: state.ErrIncompatibleState, errHas: f.errHas},
			{name: "removed", v1: opSpec{uids: true}, v2: opSpec{uids: true, removed: true}, wantErr: weir.ErrNonRestoredState, errHas: `(ID "op")`},
			{name: "removed, allowed", v1: opSpec{uids: true}, v2: opSpec{uids: true, removed: true}},
		}
		t.Run(f.name, func(t *testing.T) {
			for _, m := range modes {
				t.Run(m.name, func(t *testing.T) {
					sps := map[bool]savepoint{true: takeSavepointOf(t, m.stop, opAt, f.version(opSpec{uids: true})),
						false: takeSavepointOf(t, m.stop, opAt, f.version(opSpec{}))}
					want := uninterrupted(t, f.version(opSpec{uids: true}))
					for _, u := range upgrades {
						t.Run(u.name, func(t *testing.T) {
							var extra []weir.Option
							allow := u.v2.removed && u.wantErr == nil
							if allow {
								extra = append(extra, weir.WithAllowNonRestoredState(true))
							}
							got, logs, err := sps[u.v1.uids].restoreOf(t, f.version(u.v2), extra...)
							if u.wantErr != nil {
								require.ErrorIs(t, err, u.wantErr)
								require.ErrorContains(t, err, u.errHas)
								return
							}
							require.NoError(t, err)
							if allow {
								require.NotEmpty(t, logs.FilterMessageSnippet("dropping the state").All(), "the dropped state is logged")
								requireDropped(t, want, got, f.two)
								return
							}
							requireLines(t, want, got)
						})
					}
				})
			}
		})
	}
}

// requireDropped checks the output of v1 with the operator and v2
// without it: v1's lines are lines of the uninterrupted run, each once,
// and v2's "r,…" lines the values from where v1 stopped on: of each input,
// every value from some point to its end, once.
func requireDropped(t *testing.T, want, got []string, two bool) {
	t.Helper()
	seen := map[string]bool{}
	wanted := map[string]bool{}
	for _, l := range want {
		wanted[l] = true
	}
	first := map[int64]int64{0: -1, 1: -1} // input (value%1000) → the first i read by v2
	count := map[int64]int64{}
	for _, l := range got {
		require.False(t, seen[l], "%q twice", l)
		seen[l] = true
		if rest, ok := strings.CutPrefix(l, "r,"); ok {
			_, v, _ := strings.Cut(rest, ",")
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			in, i := n%1000, n/1000
			if first[in] < 0 || i < first[in] {
				first[in] = i
			}
			count[in]++
			continue
		}
		require.True(t, wanted[l], "%q is no line of the uninterrupted run", l)
	}
	ends := map[int64]int64{0: opN}
	if two {
		ends[1] = opN / 2
	}
	for in, end := range ends {
		require.Positive(t, count[in], "input %d: v2 read nothing", in)
		require.Equal(t, end-first[in], count[in], "input %d: v2 read every value from %d on once", in, first[in])
	}
}
