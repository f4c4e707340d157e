package join

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
	"github.com/weirstream/weir/state/pebble"
)

// intervalScenario drives op=interval: the interval join core (Interval)
// on real keyed backends. Every command runs on three variants that must
// print the same lines: the heap backend with 128 and with 7 key groups,
// and the pebble backend; snapshots are the backends' real snapshots in
// in-memory checkpoint storage, and each restore goes to the next
// backend kind (heap ↔ pebble), as a savepoint may.
type intervalScenario struct {
	cfg      IntervalConfig
	variants []*intervalVariant
	wm       int64
	snapID   int64
	snapped  bool
}

type intervalVariant struct {
	name   string
	maxPar int
	pebble bool
	b      state.KeyedBackend
	j      *Interval[string, string]
	stor   *state.FileStorage
	snap   []state.KeyedStateHandle
	out    []string
	key    string // the current key, for the output
	fs     vfs.FS
}

func newIntervalScenario(t *testing.T, d *datadriven.TestData, a *args) (scenario, string) {
	t.Helper()
	cfg := IntervalConfig{Lower: a.int64("lower"), Upper: a.int64("upper"),
		LowerExclusive: a.optBool("lowerexclusive", false), UpperExclusive: a.optBool("upperexclusive", false)}
	if _, _, err := cfg.Bounds(); err != nil {
		if !errors.Is(err, ErrBounds) {
			a.fatalf("bounds: %v", err) // an exclusive end at the int64 limit: invalid
		}
		return nil, "error: lower bound above upper bound\n"
	}
	s := &intervalScenario{cfg: cfg, wm: math.MinInt64}
	s.variants = []*intervalVariant{
		{name: "heap-128", maxPar: 128},
		{name: "heap-7", maxPar: 7},
		{name: "pebble", maxPar: 128, pebble: true, fs: vfs.NewMem()},
	}
	for _, v := range s.variants {
		v.stor = state.NewMemoryStorage()
		if err := s.build(t, v, false); err != nil {
			d.Fatalf(t, "new (%s): %v", v.name, err)
		}
	}
	return s, "ok\n"
}

// build makes v's backend and join, restored from v's snapshot if restore.
func (s *intervalScenario) build(t *testing.T, v *intervalVariant, restore bool) error {
	if v.b != nil {
		if err := v.b.Close(); err != nil {
			return err
		}
	}
	var b state.KeyedBackend
	var err error
	if v.pebble {
		pb, perr := pebble.New(pebble.Config{MaxParallelism: v.maxPar, Dir: "/interval", FS: v.fs,
			MemTableSize: 1 << 20, BlockCacheSize: 1 << 20})
		b, err = pb, perr
	} else {
		b, err = heap.New(heap.Config{MaxParallelism: v.maxPar})
	}
	if err != nil {
		return err
	}
	t.Cleanup(func() { _ = b.Close() })
	if restore {
		if err := b.Restore(v.snap, v.stor); err != nil {
			return err
		}
	}
	j, err := NewInterval[string, string](b, s.cfg, codec.String(), codec.String(), intervalOut{v})
	if err != nil {
		return err
	}
	v.b, v.j = b, j
	return nil
}

// intervalOut prints what variant v's join emits.
type intervalOut struct{ v *intervalVariant }

func (o intervalOut) Joined(l, r string, ts int64) error {
	o.v.out = append(o.v.out, fmt.Sprintf("join key=%s left=%s right=%s ts=%d", o.v.key, l, r, ts))
	return nil
}

func (o intervalOut) LateLeft(v string, ts int64) error {
	o.v.out = append(o.v.out, fmt.Sprintf("late side=left key=%s ts=%d v=%s", o.v.key, ts, v))
	return nil
}

func (o intervalOut) LateRight(v string, ts int64) error {
	o.v.out = append(o.v.out, fmt.Sprintf("late side=right key=%s ts=%d v=%s", o.v.key, ts, v))
	return nil
}

func (s *intervalScenario) run(t *testing.T, d *datadriven.TestData, a *args) string {
	t.Helper()
	var do func(v *intervalVariant) error
	switch d.Cmd {
	case "left", "right":
		key, ts, val := a.name("key"), a.int64("ts"), a.name("v")
		lo, hi, _ := s.cfg.Bounds()
		fits := func(f func(a, b int64) (int64, bool), b int64) bool { _, ok := f(ts, b); return ok }
		if d.Cmd == "left" && !(fits(addFits, lo) && fits(addFits, hi)) ||
			d.Cmd == "right" && !(fits(subFits, hi) && fits(subFits, lo)) {
			a.fatalf("ts=%d with the bounds leaves the int64 range", ts)
		}
		do = func(v *intervalVariant) error {
			v.key = key
			v.b.SetCurrentKey([]byte(key), keygroup.ForHash(codec.Hash64([]byte(key)), v.maxPar))
			var err error
			if d.Cmd == "left" {
				err = v.j.ProcessLeft(val, ts)
			} else {
				err = v.j.ProcessRight(val, ts)
			}
			if errors.Is(err, ErrNoTimestamp) {
				v.out = append(v.out, "error: element without timestamp")
				return nil
			}
			return err
		}
	case "watermark":
		ts := a.int64("ts")
		if ts < s.wm {
			a.fatalf("ts=%d below the watermark %d", ts, s.wm)
		}
		s.wm = ts
		do = func(v *intervalVariant) error { return v.j.AdvanceWatermark(ts) }
	case "state":
		do = func(v *intervalVariant) error {
			lines, err := bufferedLines(v.j)
			v.out = append(v.out, lines...)
			return err
		}
	case "snapshot":
		s.snapID++
		s.snapped = true
		id := s.snapID
		do = func(v *intervalVariant) error {
			if err := v.j.Flush(); err != nil {
				return err
			}
			run, err := v.b.Snapshot(barrier.CheckpointID(id), v.stor)
			if err != nil {
				return err
			}
			h, err := run(context.Background())
			if err != nil {
				return err
			}
			v.snap = nil
			if h != nil {
				v.snap = []state.KeyedStateHandle{*h}
			}
			return nil
		}
	case "restore":
		if !s.snapped {
			a.fatalf("restore before any snapshot")
		}
		s.wm = math.MinInt64
		do = func(v *intervalVariant) error {
			// Each restore switches the backend kind, as a savepoint
			// restored on another backend does.
			v.pebble = !v.pebble
			if v.pebble && v.fs == nil {
				v.fs = vfs.NewMem()
			}
			return s.build(t, v, true)
		}
	default:
		a.fatalf("unknown command (op=interval)")
	}
	for _, v := range s.variants {
		v.out = v.out[:0]
		if err := do(v); err != nil {
			d.Fatalf(t, "%s (%s): %v", d.Cmd, v.name, err)
		}
	}
	first := s.variants[0]
	for _, v := range s.variants[1:] {
		if !slices.Equal(first.out, v.out) {
			d.Fatalf(t, "%s: variants disagree:\n%s:\n%s\n%s:\n%s", d.Cmd,
				first.name, strings.Join(first.out, "\n"), v.name, strings.Join(v.out, "\n"))
		}
	}
	if d.Cmd == "snapshot" || d.Cmd == "restore" {
		return "ok\n"
	}
	return output(first.out)
}

// bufferedLines lists both buffers as `state` prints them: left then
// right, by key bytewise, timestamp, arrival.
func bufferedLines(j *Interval[string, string]) ([]string, error) {
	type elem struct {
		key []byte
		ts  int64
		v   string
	}
	var lines []string
	for _, side := range []Side{Left, Right} {
		var es []elem
		err := j.Buffered(side, func(key []byte, ts int64, l, r string) error {
			v := l
			if side == Right {
				v = r
			}
			es = append(es, elem{bytes.Clone(key), ts, v})
			return nil
		})
		if err != nil {
			return nil, err
		}
		slices.SortStableFunc(es, func(a, b elem) int { return cmp.Or(bytes.Compare(a.key, b.key), cmp.Compare(a.ts, b.ts)) })
		for _, e := range es {
			lines = append(lines, fmt.Sprintf("%s key=%s ts=%d v=%s", side, e.key, e.ts, e.v))
		}
	}
	if len(lines) == 0 {
		lines = []string{"empty"}
	}
	return lines, nil
}

func addFits(a, b int64) (int64, bool) {
	s := a + b
	return s, (b >= 0) == (s >= a)
}

func subFits(a, b int64) (int64, bool) {
	s := a - b
	return s, (b >= 0) == (s <= a)
}
