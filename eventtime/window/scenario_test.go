package window_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/eventtime/window"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
)

// TestScenarios runs every testdata/window/*.txt file through the real
// operator core, in the format of docs/window-scenarios.md. Each command
// drives two operators that must agree line for line: sum as Reduce and
// as Aggregate, list as Process and as Aggregate of a slice, on backends
// with different numbers of key groups, and a third with integer keys held
// by value (window.UseKeyCodec) that switches between keys by value and
// serialized keys at every restore. Snapshot and restore go through the
// heap backend's real snapshots in in-memory checkpoint storage.
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/window", func(t *testing.T, path string) {
		if filepath.Ext(path) != ".txt" {
			t.Skipf("%s is not a scenario file", path)
		}
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		ids := scenarioKeyIDs(string(text))
		var h *harness
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			args := parseArgs(t, d)
			if d.Cmd == "new" {
				h = newHarness(t, d, args, ids)
				return "ok\n"
			}
			if h == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			return h.run(t, d, args)
		})
	})
}

var (
	numberRE = regexp.MustCompile(`^-?[0-9]+$`)
	keyRE    = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	keyArgRE = regexp.MustCompile(`\bkey=([A-Za-z0-9_.-]+)`)
)

// scenarioKeyIDs numbers the keys a scenario file names in their bytewise
// order, so that the int64 keys of the typed variant order like them (as
// their big-endian encodings do) and timers with equal timestamps fire in
// the same order.
func scenarioKeyIDs(text string) map[string]int64 {
	var keys []string
	for _, m := range keyArgRE.FindAllStringSubmatch(text, -1) {
		keys = append(keys, m[1])
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	ids := make(map[string]int64, len(keys))
	for i, k := range keys {
		ids[k] = int64(i)
	}
	return ids
}

// args are a command's name=value arguments; the runner takes them out one
// by one and fails on any left over.
type args map[string]string

func parseArgs(t *testing.T, d *datadriven.TestData) args {
	a := args{}
	for _, arg := range d.CmdArgs {
		if len(arg.Vals) != 1 {
			d.Fatalf(t, "argument %s: want name=value", arg.Key)
		}
		if _, dup := a[arg.Key]; dup {
			d.Fatalf(t, "argument %s given twice", arg.Key)
		}
		a[arg.Key] = arg.Vals[0]
	}
	return a
}

func (a args) take(name string) (string, bool) {
	v, ok := a[name]
	delete(a, name)
	return v, ok
}

func (a args) str(t *testing.T, d *datadriven.TestData, name string) string {
	v, ok := a.take(name)
	if !ok {
		d.Fatalf(t, "%s: missing argument %s=", d.Cmd, name)
	}
	return v
}

func parseInt(t *testing.T, d *datadriven.TestData, name, s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if !numberRE.MatchString(s) || err != nil {
		d.Fatalf(t, "%s=%s: not a signed 64-bit decimal integer", name, s)
	}
	return n
}

func (a args) int(t *testing.T, d *datadriven.TestData, name string) int64 {
	return parseInt(t, d, name, a.str(t, d, name))
}

func (a args) optInt(t *testing.T, d *datadriven.TestData, name string, def int64) (int64, bool) {
	v, ok := a.take(name)
	if !ok {
		return def, false
	}
	return parseInt(t, d, name, v), true
}

func (a args) done(t *testing.T, d *datadriven.TestData) {
	if len(a) > 0 {
		names := make([]string, 0, len(a))
		for k := range a {
			names = append(names, k)
		}
		slices.Sort(names)
		d.Fatalf(t, "%s: unknown or misplaced argument(s) %s", d.Cmd, strings.Join(names, ", "))
	}
}

// parseConfig turns new's arguments into a window configuration and the
// function name.
func parseConfig(t *testing.T, d *datadriven.TestData, a args) (window.Config, string) {
	var cfg window.Config
	kind := a.str(t, d, "assigner")
	switch kind {
	case "tumbling":
		size := a.int(t, d, "size")
		offset, _ := a.optInt(t, d, "offset", 0)
		cfg.Assigner = window.TumblingWindows(size, offset)
	case "sliding":
		size, slide := a.int(t, d, "size"), a.int(t, d, "slide")
		offset, _ := a.optInt(t, d, "offset", 0)
		cfg.Assigner = window.SlidingWindows(size, slide, offset)
	case "session":
		cfg.Assigner = window.SessionWindows(a.int(t, d, "gap"))
	case "global":
		cfg.Assigner = window.GlobalWindows()
	default:
		d.Fatalf(t, "unknown assigner=%s", kind)
	}
	if tm, ok := a.take("time"); ok {
		switch tm {
		case "event":
		case "processing":
			if kind == "global" {
				d.Fatalf(t, "time=processing with assigner=global")
			}
			cfg.Time = window.ProcessingTime
		default:
			d.Fatalf(t, "unknown time=%s", tm)
		}
	}
	if tr, ok := a.take("trigger"); ok {
		purging := strings.HasPrefix(tr, "purging-")
		base := strings.TrimPrefix(tr, "purging-")
		name, param, hasParam := strings.Cut(base, ":")
		switch {
		case name == "default" && !hasParam:
			cfg.Trigger = window.DefaultTrigger()
		case name == "count" && hasParam:
			cfg.Trigger = window.CountTrigger(parseInt(t, d, "trigger count", param))
		case name == "continuous" && hasParam:
			cfg.Trigger = window.ContinuousEventTimeTrigger(parseInt(t, d, "trigger interval", param))
		default:
			d.Fatalf(t, "unknown trigger=%s", tr)
		}
		if purging {
			cfg.Trigger = window.Purging(cfg.Trigger)
		}
	}
	cfg.AllowedLateness, _ = a.optInt(t, d, "lateness", 0)
	fn := "sum"
	if f, ok := a.take("function"); ok {
		if f != "sum" && f != "list" {
			d.Fatalf(t, "unknown function=%s", f)
		}
		fn = f
	}
	if so, ok := a.take("sideoutput"); ok {
		switch so {
		case "on":
			cfg.SideOutputLateData = true
		case "off":
		default:
			d.Fatalf(t, "sideoutput=%s: want on or off", so)
		}
	}
	a.done(t, d)
	return cfg, fn
}

// harness runs one scenario: two operator variants, the fake processing
// clock, the runner's view of the watermark, and the latest snapshot.
type harness struct {
	cfg      window.Config
	fn       string
	clock    int64
	wm       int64
	variants []*variant
	snapID   barrier.CheckpointID
}

// variant is one operator under test with its backend and what it output
// during the current command.
type variant struct {
	name   string
	maxPar int
	// ids and names map the scenario's keys to and from the int64 keys of
	// the typed variant (nil for the others); byValue is whether its
	// current operator holds them by value.
	ids      map[string]int64
	names    map[int64]string
	byValue  bool
	b        *heap.Backend
	op       int64Operator
	out      []string
	overflow bool
	fires    int
	snap     []state.KeyedStateHandle
	stor     *state.FileStorage
	build    func(b *heap.Backend) error
}

// maxFiresPerCommand guards against scenarios that would fire without end.
const maxFiresPerCommand = 1_000_000

func newHarness(t *testing.T, d *datadriven.TestData, a args, ids map[string]int64) *harness {
	cfg, fn := parseConfig(t, d, a)
	h := &harness{fn: fn, wm: math.MinInt64}
	cfg.Clock = func() int64 { return h.clock }
	h.cfg = cfg
	if err := cfg.Validate(); err != nil {
		d.Fatalf(t, "invalid configuration: %v", err)
	}
	h.variants = []*variant{
		{name: fn + "-direct", maxPar: keygroup.DefaultMaxParallelism},
		{name: fn + "-aggregate", maxPar: 7},
		{name: fn + "-typed", maxPar: 16, ids: ids, names: make(map[int64]string, len(ids))},
	}
	for k, id := range ids {
		h.variants[2].names[id] = k
	}
	for i, v := range h.variants {
		v.build = h.builder(v, i == 1)
		v.stor = state.NewMemoryStorage()
		if err := v.build(nil); err != nil {
			d.Fatalf(t, "new: %v", err)
		}
	}
	return h
}

// out collects a variant's emissions.
type out[IN, OUT any] struct {
	v      *variant
	format func(OUT) string
}

func (o out[IN, OUT]) Emit(key []byte, w window.Window, r OUT) error {
	o.v.fires++
	if o.v.fires > maxFiresPerCommand {
		return fmt.Errorf("more than %d firings in one command", maxFiresPerCommand)
	}
	o.v.out = append(o.v.out, fmt.Sprintf("fire key=%s window=%s result=%s", o.v.keyName(key), w, o.format(r)))
	return nil
}

func (o out[IN, OUT]) Late(key []byte, ts int64, v IN) error {
	o.v.out = append(o.v.out, fmt.Sprintf("late key=%s ts=%d v=%v", o.v.keyName(key), ts, v))
	return nil
}

// keyBytes returns the serialized form of the scenario's key k.
func (v *variant) keyBytes(k string) []byte {
	if v.ids == nil {
		return []byte(k)
	}
	return codec.Int64().Append(nil, v.ids[k])
}

// keyName returns the scenario's key serialized as b.
func (v *variant) keyName(b []byte) string {
	if v.ids == nil {
		return string(b)
	}
	id, err := codec.Int64().Decode(b)
	if name, ok := v.names[id]; ok && err == nil {
		return name
	}
	return fmt.Sprintf("unknown-key-%x", b)
}

func formatList(vs []int64) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = strconv.FormatInt(v, 10)
	}
	return strings.Join(s, ",")
}

// builder returns the function that (re)creates variant v's operator on a
// fresh backend, restored from snap if not nil.
func (h *harness) builder(v *variant, aggregate bool) func(*heap.Backend) error {
	return func(restoreFrom *heap.Backend) error {
		b, err := heap.New(heap.Config{MaxParallelism: v.maxPar})
		if err != nil {
			return err
		}
		if restoreFrom != nil {
			if err := b.Restore(v.snap, v.stor); err != nil {
				return err
			}
		}
		v.b = b
		sum := func(a, x int64) int64 {
			s := a + x
			if (s > a) != (x > 0) {
				v.overflow = true
			}
			return s
		}
		switch {
		case h.fn == "sum" && !aggregate:
			op, err := window.New(b, h.cfg, window.Reduce(codec.Int64(), sum),
				window.Output[int64, int64](out[int64, int64]{v, func(r int64) string { return strconv.FormatInt(r, 10) }}))
			if err != nil {
				return err
			}
			if err := useKeyCodec(v, op); err != nil {
				return err
			}
			v.op = op
		case h.fn == "sum":
			op, err := window.New(b, h.cfg, window.Aggregate(window.AggregateFunction[int64, int64, string]{
				Codec: codec.Int64(), New: func() int64 { return 0 }, Add: sum, Merge: sum,
				Result: func(a int64) string { return strconv.FormatInt(a, 10) },
			}), window.Output[int64, string](out[int64, string]{v, func(r string) string { return r }}))
			if err != nil {
				return err
			}
			v.op = op
		case !aggregate:
			op, err := window.New(b, h.cfg, window.Process(codec.Int64(),
				func(_ []byte, _ window.Window, elems []int64, emit func([]int64) error) error { return emit(elems) }),
				window.Output[int64, []int64](out[int64, []int64]{v, formatList}))
			if err != nil {
				return err
			}
			if err := useKeyCodec(v, op); err != nil {
				return err
			}
			v.op = op
		default:
			op, err := window.New(b, h.cfg, window.Aggregate(window.AggregateFunction[int64, []int64, string]{
				Codec:  codec.Slice(codec.Int64()),
				New:    func() []int64 { return nil },
				Add:    func(a []int64, x int64) []int64 { return append(a, x) },
				Merge:  func(a, b []int64) []int64 { return append(a, b...) },
				Result: func(a []int64) string { return formatList(a) },
			}), window.Output[int64, string](out[int64, string]{v, func(r string) string { return r }}))
			if err != nil {
				return err
			}
			v.op = op
		}
		return nil
	}
}

// useKeyCodec makes the typed variant's operator op hold its keys by value
// every other time it is built: first by value, then serialized after a
// restore, and so on, so that each restores the other's snapshots.
func useKeyCodec[OUT any](v *variant, op *window.Operator[int64, OUT]) error {
	if v.ids == nil {
		return nil
	}
	v.byValue = !v.byValue
	if !v.byValue {
		return nil
	}
	return window.UseKeyCodec(op, codec.Int64())
}

// int64Operator is an Operator[int64, OUT] of any OUT.
type int64Operator interface {
	ProcessElement(key []byte, keyGroup int, ts int64, v int64) error
	AdvanceWatermark(wm int64) error
	AdvanceProcessingTime(now int64) error
	LateRecordsDropped() int64
	PrepareSnapshot() error
}

// run runs one command other than new and returns its output.
func (h *harness) run(t *testing.T, d *datadriven.TestData, a args) string {
	for _, v := range h.variants {
		v.out, v.fires, v.overflow = v.out[:0], 0, false
	}
	var do func(v *variant) error
	switch d.Cmd {
	case "element":
		key := a.str(t, d, "key")
		if !keyRE.MatchString(key) {
			d.Fatalf(t, "bad key %q", key)
		}
		ts := a.int(t, d, "ts")
		val := a.int(t, d, "v")
		a.done(t, d)
		if ts == math.MinInt64 {
			d.Fatalf(t, "ts=%d is the no-timestamp marker", ts)
		}
		do = func(v *variant) error {
			before := v.op.LateRecordsDropped()
			kb := v.keyBytes(key)
			kg := keygroup.ForHash(codec.Hash64(kb), v.maxPar)
			if err := v.op.ProcessElement(kb, kg, ts, val); err != nil {
				return err
			}
			switch n := v.op.LateRecordsDropped() - before; n {
			case 0:
			case 1:
				v.out = append(v.out, fmt.Sprintf("dropped key=%s ts=%d v=%d", key, ts, val))
			default:
				return fmt.Errorf("one element dropped %d times", n)
			}
			return nil
		}
	case "watermark":
		wm := a.int(t, d, "ts")
		a.done(t, d)
		if wm < h.wm {
			d.Fatalf(t, "watermark %d below the current one, %d", wm, h.wm)
		}
		h.wm = wm
		do = func(v *variant) error { return v.op.AdvanceWatermark(wm) }
	case "proctime":
		now := a.int(t, d, "ts")
		a.done(t, d)
		if now < h.clock {
			d.Fatalf(t, "proctime %d below the processing clock, %d", now, h.clock)
		}
		h.clock = now
		do = func(v *variant) error { return v.op.AdvanceProcessingTime(now) }
	case "snapshot":
		a.done(t, d)
		h.snapID++
		do = func(v *variant) error {
			if err := v.op.PrepareSnapshot(); err != nil {
				return err
			}
			run, err := v.b.Snapshot(h.snapID, v.stor)
			if err != nil {
				return err
			}
			handle, err := run(context.Background())
			if err != nil {
				return err
			}
			v.snap = []state.KeyedStateHandle{*handle}
			return nil
		}
	case "restore":
		a.done(t, d)
		if h.snapID == 0 {
			d.Fatalf(t, "restore before any snapshot")
		}
		h.wm = math.MinInt64
		do = func(v *variant) error { return v.build(v.b) }
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	for _, v := range h.variants {
		if err := do(v); err != nil {
			d.Fatalf(t, "%s (%s): %v", d.Cmd, v.name, err)
		}
		if v.overflow {
			d.Fatalf(t, "%s (%s): a sum left the int64 range", d.Cmd, v.name)
		}
	}
	first := h.variants[0]
	for _, v := range h.variants[1:] {
		if !slices.Equal(first.out, v.out) {
			d.Fatalf(t, "%s: variants disagree:\n%s:\n%s\n%s:\n%s", d.Cmd,
				first.name, strings.Join(first.out, "\n"), v.name, strings.Join(v.out, "\n"))
		}
	}
	if len(first.out) == 0 {
		return "ok\n"
	}
	return strings.Join(first.out, "\n") + "\n"
}
