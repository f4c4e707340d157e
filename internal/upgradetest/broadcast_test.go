package upgradetest_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
)

// gate opens once every subtask of the broadcast process has all rules:
// v1's main input waits for it, so that every value meets every rule
// (the output is then that of an uninterrupted run, whatever the timing).
type gate struct {
	want int64
	n    atomic.Int64
	once sync.Once
	ch   chan struct{}
}

func (g *gate) add() {
	if g.n.Add(1) == g.want {
		g.once.Do(func() { close(g.ch) })
	}
}

// gatedReader reads 0..n-1 once its gate is open.
type gatedReader struct {
	seqReader
	g *gate
}

func (r *gatedReader) Poll() (int64, weir.ReadStatus, error) {
	select {
	case <-r.g.ch:
	default:
		return 0, weir.NothingAvailable, nil
	}
	v, ok, err := r.Next()
	if !ok || err != nil {
		return 0, weir.EndOfInput, err
	}
	return v, weir.Read, nil
}

func (r *gatedReader) Available() <-chan struct{} { return r.g.ch }

// multiply multiplies each value by its key's rule, a broadcast state.
type multiply struct {
	d     weir.MapStateDescriptor[int64, int64]
	g     *gate
	rules *weir.BroadcastMap[int64, int64]
}

func (f *multiply) Open(c *weir.RuntimeContext) (err error) {
	f.rules, err = weir.GetBroadcastState(c, f.d)
	return err
}

func (f *multiply) ProcessElement(r rec, out *weir.Collector[string]) error {
	m, _ := f.rules.Get(r[0])
	out.Emit(fmt.Sprintf("%d,%d,%d", r[0], r[1], r[1]*m))
	return nil
}

func (f *multiply) ProcessBroadcastElement(r rec, _ *weir.Collector[string]) error {
	if err := f.rules.Put(r[0], r[1]); err != nil {
		return err
	}
	f.g.add()
	return nil
}

// broadcastJob: rules (key → multiplier, a slice source that finishes
// early) broadcast to a process function "op" that multiplies the main
// input's values by them. The rules' source had finished in v1's
// savepoint, so v2 gets its rules only from the restored broadcast state.
func broadcastJob(sp opSpec) version {
	par := sp.par
	if par == 0 {
		par = 2
	}
	uid := func(s string) string {
		if sp.uids {
			return s
		}
		return ""
	}
	return version{opts: []weir.Option{weir.WithParallelism(par)}, build: func(env *weir.Environment, out string, th *throttle) {
		g := &gate{want: int64(par * keys), ch: make(chan struct{})}
		if th.reached == nil {
			close(g.ch) // v2: the rules are in the restored state
		}
		main := weir.FromPollingReader(env, "values", func(int, int) (weir.PollingReader[int64], error) {
			return &gatedReader{seqReader: seqReader{n: opN}, g: g}, nil
		}).Parallelism(1).UID(uid("values"))
		values := throttled(weir.Map(main, func(i int64) rec { return rec{i % keys, i * 1000} }).WithCodec(recCodec).Parallelism(1), th).WithCodec(recCodec)
		if sp.inserted {
			values = weir.Map(values, func(r rec) rec { return r }).WithCodec(recCodec).Parallelism(1)
		}
		rules := make([]rec, keys)
		for k := range rules {
			rules[k] = rec{int64(k), int64(k + 1)}
		}
		var lines *weir.Stream[string]
		if sp.removed {
			lines = weir.Map(values, func(r rec) string { return fmt.Sprintf("r,%d,%d", r[0], r[1]) })
			g.want = keys
			weir.SinkFunc(weir.FromSlice(env, rules).WithCodec(recCodec).Parallelism(1).UID(uid("rules")),
				func(rec) error { g.add(); return nil })
		} else {
			d := weir.MapStateDescriptor[int64, int64]{Name: "rules"}
			if sp.changed {
				d.ValueCodec = codec.JSON[int64]()
			}
			bs := weir.Broadcast(weir.FromSlice(env, rules).WithCodec(recCodec).Parallelism(1).UID(uid("rules")), d)
			lines = weir.BroadcastProcess(values, bs, func() weir.BroadcastProcessFunction[rec, rec, string] {
				return &multiply{d: d, g: g}
			}).UID(uid("op"))
		}
		weir.FileSink(lines, out, func(s string) []byte { return []byte(s) }).UID(uid("sink"))
	}}
}

// A broadcast state through the upgrades of TestOperatorUpgrades: every
// subtask of the restored job, at any parallelism, has the rules (their
// source does not run again), and the output is that of an uninterrupted
// run; changed types and a removed operator are refused.
func TestBroadcastStateUpgrades(t *testing.T) {
	type upgrade struct {
		name    string
		v1, v2  opSpec
		wantErr error
		errHas  string
	}
	upgrades := []upgrade{
		{name: "unchanged", v1: opSpec{uids: true}, v2: opSpec{uids: true}},
		{name: "rescaled", v1: opSpec{uids: true}, v2: opSpec{uids: true, par: 3}},
		{name: "rescaled down", v1: opSpec{uids: true}, v2: opSpec{uids: true, par: 1}},
		{name: "unchanged without UIDs", v2: opSpec{}},
		{name: "without UIDs, a map inserted before it", v2: opSpec{inserted: true}, wantErr: weir.ErrNonRestoredState, errHas: "Set UIDs"},
		{name: "a map inserted before it", v1: opSpec{uids: true}, v2: opSpec{uids: true, inserted: true}},
		{name: "its state's type changed", v1: opSpec{uids: true}, v2: opSpec{uids: true, changed: true},
			wantErr: state.ErrIncompatibleState, errHas: "json[int64]"},
		{name: "removed", v1: opSpec{uids: true}, v2: opSpec{uids: true, removed: true}, wantErr: weir.ErrNonRestoredState, errHas: `(ID "op")`},
		{name: "removed, allowed", v1: opSpec{uids: true}, v2: opSpec{uids: true, removed: true}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			sps := map[bool]savepoint{true: takeSavepointOf(t, m.stop, opAt, broadcastJob(opSpec{uids: true})),
				false: takeSavepointOf(t, m.stop, opAt, broadcastJob(opSpec{}))}
			var want []string // each value times its key's rule
			for i := range int64(opN) {
				want = append(want, fmt.Sprintf("%d,%d,%d", i%keys, i*1000, i*1000*(i%keys+1)))
			}
			slices.Sort(want)
			for _, u := range upgrades {
				t.Run(u.name, func(t *testing.T) {
					allow := u.v2.removed && u.wantErr == nil
					var extra []weir.Option
					if allow {
						extra = append(extra, weir.WithAllowNonRestoredState(true))
					}
					got, _, err := sps[u.v1.uids].restoreOf(t, broadcastJob(u.v2), extra...)
					if u.wantErr != nil {
						require.ErrorIs(t, err, u.wantErr)
						require.ErrorContains(t, err, u.errHas)
						return
					}
					require.NoError(t, err)
					if allow {
						requireDropped(t, want, got, false)
						return
					}
					requireLines(t, want, got)
				})
			}
		})
	}
}
