package upgradetest_test

import (
	"cmp"
	"context"
	"fmt"
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
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/state"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The job: a generator of n records (key i%keys, value i) on one subtask,
// so that every key's values arrive in order; a stateless map; a keyed
// running sum (a process function with a value state); an exactly-once
// file sink of "key,sum" lines. v1 is throttled after `at` records so
// that it is still running when the test takes its savepoint.
const (
	n    = 6000
	keys = 7
	at   = 2000
)

type rec = [2]int64 // key, value

var recCodec = codec.Struct2(codec.Int64(), func(r rec) int64 { return r[0] }, codec.Int64(), func(r rec) int64 { return r[1] },
	func(k, v int64) rec { return rec{k, v} })

func key(r rec) int64 { return r[0] }

// spec describes one version of the job.
type spec struct {
	uids       bool   // UIDs on the stateful operators
	par        int    // the job's parallelism (0: 2)
	sumPar     int    // the sum's parallelism (0: the job's)
	sinkPar    int    // the sink's parallelism (0: the job's)
	noChaining bool   // WithChaining(false)
	maxPar     int    // WithMaxParallelism (0: the default)
	noMap      bool   // without the stateless map
	before     string // "map", "reduce" or "process": an operator inserted before the sum
	beforeUID  string // its UID ("": "before")
	between    string // "map": an operator inserted between the sum and the sink
	sumName    string // the sum's name ("": the default)
	noSum      bool   // without the sum: the sink writes "key,value" lines
	allowDrop  bool   // WithAllowNonRestoredState(true)
	sumState   sumState
}

// sumState is how the sum keeps its running sum: v1 keeps an int64.
type sumState interface {
	add(c *weir.RuntimeContext, v int64) (int64, error)
	open(c *weir.RuntimeContext) error
	clone() sumState
}

type int64Sum struct {
	st interface {
		Value() (int64, error)
		Update(int64) error
	}
}

func (s *int64Sum) open(c *weir.RuntimeContext) error {
	st, err := weir.ValueState(c, "sum", codec.Int64())
	s.st = st
	return err
}

func (s *int64Sum) add(_ *weir.RuntimeContext, v int64) (int64, error) {
	sum, err := s.st.Value()
	if err != nil {
		return 0, err
	}
	sum += v
	return sum, s.st.Update(sum)
}

func (s *int64Sum) clone() sumState { return &int64Sum{} }

// typedSum keeps the running sum as a T: v2 changed the state's type.
type typedSum[T any] struct {
	c     codec.Codec[T]
	get   func(T) int64
	set   func(int64) T
	value interface {
		Value() (T, error)
		Update(T) error
	}
}

func (s *typedSum[T]) open(c *weir.RuntimeContext) error {
	st, err := weir.ValueState(c, "sum", s.c)
	s.value = st
	return err
}

func (s *typedSum[T]) add(_ *weir.RuntimeContext, v int64) (int64, error) {
	old, err := s.value.Value()
	if err != nil {
		return 0, err
	}
	sum := s.get(old) + v
	return sum, s.value.Update(s.set(sum))
}

func (s *typedSum[T]) clone() sumState { c := *s; return &c }

type pair32 struct{ hi, lo int32 }

type acc struct{ sum, count int64 }

var (
	accCodec = codec.Struct2(codec.Int64(), func(a acc) int64 { return a.sum }, codec.Int64(), func(a acc) int64 { return a.count },
		func(s, c int64) acc { return acc{s, c} })
	stringSum = &typedSum[string]{c: codec.String(),
		get: func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v },
		set: func(v int64) string { return strconv.FormatInt(v, 10) }}
	pair32Sum = &typedSum[pair32]{c: codec.Struct2(codec.Int32(), func(p pair32) int32 { return p.hi }, codec.Int32(),
		func(p pair32) int32 { return p.lo }, func(h, l int32) pair32 { return pair32{h, l} }),
		get: func(p pair32) int64 { return int64(p.hi)<<32 | int64(uint32(p.lo)) },
		set: func(v int64) pair32 { return pair32{int32(v >> 32), int32(v)} }}
	accSum = &typedSum[acc]{c: accCodec, get: func(a acc) int64 { return a.sum }, set: func(v int64) acc { return acc{sum: v} }}
	// The deliberate evolution: v2's accumulator reads v1's int64 sums.
	evolvedSum = &typedSum[acc]{c: codec.Evolve(accCodec, codec.Int64(), func(sum int64) acc { return acc{sum: sum, count: -1} }),
		get: func(a acc) int64 { return a.sum }, set: func(v int64) acc { return acc{sum: v} }}
)

// build adds the job of sp to env, writing into out; reached (if not nil)
// is closed after `at` records, and the job then slows down.
func build(env *weir.Environment, sp spec, out string, reached chan struct{}) {
	var seen atomic.Int64
	var once sync.Once
	src := weir.FromGenerator(env, n, func(i int64) rec { return rec{i % keys, i} }).WithCodec(recCodec).Parallelism(1)
	if sp.uids {
		src.UID("source")
	}
	s := src
	if !sp.noMap {
		s = weir.Map(s, func(r rec) rec {
			if reached != nil && seen.Add(1) >= at {
				once.Do(func() { close(reached) })
				time.Sleep(100 * time.Microsecond) // throttle, not synchronisation
			}
			return r
		}).WithCodec(recCodec).Parallelism(1)
	}
	switch sp.before {
	case "map": // on one subtask, so that each key's values stay in order
		s = weir.Map(s, func(r rec) rec { return r }).WithCodec(recCodec).Parallelism(1)
	case "reduce":
		s = weir.Reduce(weir.KeyBy(s, key, codec.Int64()), func(_, v rec) rec { return v })
		if sp.uids {
			s.UID(cmp.Or(sp.beforeUID, "before"))
		}
	case "process":
		s = weir.Process(weir.KeyBy(s, key, codec.Int64()), func() weir.KeyedProcessFunction[int64, rec, rec] {
			var count interface {
				Value() (int64, error)
				Update(int64) error
			}
			return weir.ProcessFunc(func(c *weir.RuntimeContext) error {
				st, err := weir.ValueState(c, "count", codec.Int64())
				count = st
				return err
			}, func(_ int64, r rec, out *weir.Collector[rec]) error {
				c, err := count.Value()
				if err == nil {
					err = count.Update(c + 1)
				}
				out.Emit(r)
				return err
			})
		}).WithCodec(recCodec)
		if sp.uids {
			s.UID(cmp.Or(sp.beforeUID, "before"))
		}
	}
	lines := weir.Map(s, func(r rec) string { return fmt.Sprintf("r,%d,%d", r[0], r[1]) })
	if !sp.noSum {
		st := sp.sumState
		if st == nil {
			st = &int64Sum{}
		}
		sums := weir.Process(weir.KeyBy(s, key, codec.Int64()), func() weir.KeyedProcessFunction[int64, rec, string] {
			st := st.clone()
			var rc *weir.RuntimeContext
			return weir.ProcessFunc(func(c *weir.RuntimeContext) error {
				rc = c
				return st.open(c)
			}, func(k int64, r rec, out *weir.Collector[string]) error {
				sum, err := st.add(rc, r[1])
				out.Emit(fmt.Sprintf("%d,%d", k, sum))
				return err
			})
		})
		if sp.sumName != "" {
			sums.Name(sp.sumName)
		}
		if sp.uids {
			sums.UID("sum")
		}
		if sp.sumPar > 0 {
			sums.Parallelism(sp.sumPar)
		}
		lines = sums
	}
	if sp.between == "map" {
		lines = weir.Map(lines, strings.Clone)
	}
	sink := weir.FileSink(lines, out, func(s string) []byte { return []byte(s) })
	if sp.uids {
		sink.UID("sink")
	}
	if sp.sinkPar > 0 {
		sink.Parallelism(sp.sinkPar)
	}
}

func options(sp spec, ckpt weir.CheckpointConfig, log *zap.Logger, extra ...weir.Option) []weir.Option {
	par := sp.par
	if par == 0 {
		par = 2
	}
	opts := []weir.Option{weir.WithParallelism(par), weir.WithBufferTimeout(time.Millisecond), weir.WithCheckpointing(ckpt),
		weir.WithChaining(!sp.noChaining), weir.WithLogger(log), weir.WithAllowNonRestoredState(sp.allowDrop)}
	if sp.maxPar > 0 {
		opts = append(opts, weir.WithMaxParallelism(sp.maxPar))
	}
	return append(opts, extra...)
}

// want is the exact output of an uninterrupted run of the job, sorted:
// the running sums of records 0 to upTo-1 and, without the sum, the
// records from upTo on as "r,key,value" lines.
func want(upTo int) []string {
	var lines []string
	sums := map[int64]int64{}
	for i := int64(0); i < n; i++ {
		sums[i%keys] += i
		if i < int64(upTo) {
			lines = append(lines, fmt.Sprintf("%d,%d", i%keys, sums[i%keys]))
		} else {
			lines = append(lines, fmt.Sprintf("r,%d,%d", i%keys, i))
		}
	}
	slices.Sort(lines)
	return lines
}

// committed reads the lines of the committed part files in dir.
func committed(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var lines []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		lines = append(lines, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")...)
	}
	return slices.DeleteFunc(lines, func(s string) bool { return s == "" })
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeoutCause(t.Context(), 2*time.Minute,
		fmt.Errorf("test %s: still running after 2m: a liveness bug", t.Name()))
	t.Cleanup(cancel)
	return ctx
}

// savepoint is v1 stopped at a savepoint, and what its output directory
// held then (the committed part files and the transactions in progress),
// so that each upgrade starts from the same files.
type savepoint struct {
	path  string
	files map[string][]byte // name in out → content
	out   string
}

// takeSavepoint runs v1 (spec v1) and stops it at a savepoint: with
// StopWithSavepoint (checkpoints every 20 ms, the savepoint commits), or
// with TriggerSavepoint and a cancel (no checkpoint: the job restored
// from the savepoint commits its transactions).
func takeSavepoint(t *testing.T, v1 spec, stop bool) savepoint {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	ckpt := weir.CheckpointConfig{Interval: time.Hour}
	if stop {
		ckpt.Interval = 20 * time.Millisecond
	}
	env := weir.NewEnvironment(options(v1, ckpt, nil)...)
	reached := make(chan struct{})
	build(env, v1, out, reached)
	return stopAtSavepoint(t, env, stop, untilClosed(reached), dir, out)
}

// reset puts the output directory back as v1 left it.
func (s savepoint) reset(t *testing.T) {
	require.NoError(t, os.RemoveAll(s.out))
	require.NoError(t, os.MkdirAll(s.out, 0o755))
	for name, b := range s.files {
		require.NoError(t, os.WriteFile(filepath.Join(s.out, name), b, 0o644))
	}
}

// restore runs v2 from the savepoint and returns its error and the
// committed output of both versions.
func (s savepoint) restore(t *testing.T, v2 spec) ([]string, *observer.ObservedLogs, error) {
	s.reset(t)
	core, logs := observer.New(zap.WarnLevel)
	env := weir.NewEnvironment(options(v2, weir.CheckpointConfig{Interval: 20 * time.Millisecond}, zap.New(core),
		weir.WithRestoreFrom(s.path), weir.WithRestartStrategy(coordinator.NoRestart{}))...)
	build(env, v2, s.out, nil)
	_, err := env.Execute(testCtx(t))
	return committed(t, s.out), logs, err
}

// An upgrade and what it must give: the exact output, or an error.
type upgrade struct {
	name    string
	v1, v2  spec
	wantErr error  // errors.Is
	errHas  string // and its message contains
}

var upgrades = []upgrade{
	{name: "unchanged", v1: spec{uids: true}, v2: spec{uids: true}},
	{name: "unchanged without UIDs", v2: spec{}},
	{name: "a stateless operator added", v1: spec{uids: true}, v2: spec{uids: true, before: "map"}},
	{name: "a stateful operator added", v1: spec{uids: true}, v2: spec{uids: true, before: "process"}},
	{name: "an operator added between two chained ones", v1: spec{uids: true}, v2: spec{uids: true, between: "map"}},
	{name: "a stateless operator removed", v1: spec{uids: true}, v2: spec{uids: true, noMap: true}},
	{name: "renamed", v1: spec{uids: true}, v2: spec{uids: true, sumName: "total"}},
	{name: "renamed without UIDs", v2: spec{sumName: "total"}},
	{name: "rescaled", v1: spec{uids: true}, v2: spec{uids: true, par: 3}},
	{name: "rescaled without UIDs", v2: spec{par: 1}},
	{name: "the sum rescaled, the sink re-chained", v1: spec{uids: true}, v2: spec{uids: true, sumPar: 3}},
	{name: "the sink rescaled out of the sum's chain", v1: spec{uids: true}, v2: spec{uids: true, sinkPar: 1}},
	{name: "chaining off", v1: spec{uids: true}, v2: spec{uids: true, noChaining: true}},
	{name: "chaining off without UIDs", v2: spec{noChaining: true}},
	{name: "max parallelism changed", v2: spec{maxPar: 64}, errHas: "max parallelism"},
	{name: "without UIDs, a keyed process inserted before the sum", v2: spec{before: "process"},
		wantErr: weir.ErrNonRestoredState, errHas: "Set UIDs"},
	{name: "without UIDs, a reduce inserted before the sum", v2: spec{before: "reduce"},
		wantErr: weir.ErrNonRestoredState, errHas: "Set UIDs"},
	{name: "without UIDs, a map added before the sink", v2: spec{between: "map"}, wantErr: weir.ErrNonRestoredState},
	{name: "the sum's state int64 → string", v1: spec{uids: true}, v2: spec{uids: true, sumState: stringSum},
		wantErr: state.ErrIncompatibleState, errHas: `state "sum" restored from the checkpoint as value of int64, declared now as value of string`},
	{name: "the sum's state int64 → a struct of two int32", v1: spec{uids: true}, v2: spec{uids: true, sumState: pair32Sum},
		wantErr: state.ErrIncompatibleState, errHas: "struct2[upgradetest_test.pair32](int32,int32)"},
	{name: "the sum's state int64 → a struct of two int64", v1: spec{uids: true}, v2: spec{uids: true, sumState: accSum},
		wantErr: state.ErrIncompatibleState, errHas: "operator process"},
	{name: "the sum's state evolved with codec.Evolve", v1: spec{uids: true}, v2: spec{uids: true, sumState: evolvedSum}},
	{name: "without UIDs, the sum's state changed", v2: spec{sumState: stringSum}, wantErr: state.ErrIncompatibleState},
	{name: "the sum removed", v1: spec{uids: true}, v2: spec{uids: true, noSum: true},
		wantErr: weir.ErrNonRestoredState, errHas: `process (ID "sum")`},
	{name: "the sum removed, allowed", v1: spec{uids: true}, v2: spec{uids: true, noSum: true, allowDrop: true}},
}

// Every upgrade of the list, from a savepoint of StopWithSavepoint and
// from one of TriggerSavepoint and a cancel: the output of both versions
// together is the exact output of an uninterrupted run, or v2 fails to
// start with the error that says why.
func TestUpgrades(t *testing.T) {
	for _, stop := range []bool{true, false} {
		t.Run(map[bool]string{true: "StopWithSavepoint", false: "TriggerSavepoint+Cancel"}[stop], func(t *testing.T) {
			sps := map[bool]savepoint{true: takeSavepoint(t, spec{uids: true}, stop), false: takeSavepoint(t, spec{}, stop)}
			for _, u := range upgrades {
				t.Run(u.name, func(t *testing.T) {
					sp := sps[u.v1.uids]
					got, logs, err := sp.restore(t, u.v2)
					if u.wantErr != nil || u.errHas != "" {
						require.Error(t, err)
						if u.wantErr != nil {
							require.ErrorIs(t, err, u.wantErr)
						}
						require.ErrorContains(t, err, u.errHas)
						return
					}
					require.NoError(t, err)
					slices.Sort(got)
					upTo := n
					if u.v2.noSum {
						// v1's sums up to the savepoint, then v2's records.
						upTo = len(slices.DeleteFunc(slices.Clone(got), func(l string) bool { return strings.HasPrefix(l, "r,") }))
						require.Positive(t, upTo)
						require.Less(t, upTo, n)
						require.NotEmpty(t, logs.FilterMessageSnippet("dropping the state").All(), "the dropped state is logged")
					}
					requireLines(t, want(upTo), got)
				})
			}
		})
	}
}

// requireLines fails unless got (sorted) is want, reporting the first
// differences only.
func requireLines(t *testing.T, want, got []string) {
	t.Helper()
	if slices.Equal(want, got) {
		return
	}
	var missing, extra []string
	i, j := 0, 0
	for i < len(want) || j < len(got) {
		switch {
		case j == len(got) || i < len(want) && want[i] < got[j]:
			missing = append(missing, want[i])
			i++
		case i == len(want) || got[j] < want[i]:
			extra = append(extra, got[j])
			j++
		default:
			i++
			j++
		}
	}
	t.Fatalf("%d lines, want %d: %d missing (first %v), %d unexpected (first %v)", len(got), len(want),
		len(missing), missing[:min(5, len(missing))], len(extra), extra[:min(5, len(extra))])
}

// Execute warns once of the stateful operators without a UID of a job
// that checkpoints, naming each with its generated ID; not of those with
// one, nor without checkpointing.
func TestWarnsOfStatefulOperatorsWithoutUID(t *testing.T) {
	run := func(sp spec, ckpt bool) []observer.LoggedEntry {
		core, logs := observer.New(zap.WarnLevel)
		opts := []weir.Option{weir.WithLogger(zap.New(core))}
		if ckpt {
			opts = append(opts, weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
		}
		env := weir.NewEnvironment(opts...)
		build(env, sp, filepath.Join(t.TempDir(), "out"), nil)
		_, err := env.Execute(testCtx(t))
		require.NoError(t, err)
		return logs.FilterMessageSnippet("without a UID").All()
	}
	warned := run(spec{}, true)
	require.Len(t, warned, 1)
	ops, _ := warned[0].ContextMap()["operators"].([]any)
	require.Len(t, ops, 3, "%v", ops) // the source, the sum, the sink; not the maps
	for i, name := range []string{"generator source", "process", "file sink"} {
		require.Regexp(t, "^"+name+` \(generated ID [0-9a-f]{32}\)$`, ops[i])
	}
	require.Empty(t, run(spec{uids: true}, true))
	require.Empty(t, run(spec{}, false))
}
