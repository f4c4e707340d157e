package join

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
)

// intervalModel is a naive interval join: every element ever buffered in
// one list per side, rescanned for each element.
type intervalModel struct {
	lo, hi int64
	wm     int64
	elems  [2][]modelElem
}

type modelElem struct {
	key string
	ts  int64
	v   string
}

func (m *intervalModel) element(s Side, e modelElem) []string {
	if e.ts < m.wm {
		return []string{fmt.Sprintf("late %s %s %d %s", s, e.key, e.ts, e.v)}
	}
	m.elems[s] = append(m.elems[s], e)
	other := m.elems[1-s]
	var matches []modelElem
	for _, o := range other {
		l, r := e.ts, o.ts
		if s == Right {
			l, r = o.ts, e.ts
		}
		if o.key == e.key && l+m.lo <= r && r <= l+m.hi {
			matches = append(matches, o)
		}
	}
	slices.SortStableFunc(matches, func(a, b modelElem) int { return cmp.Compare(a.ts, b.ts) })
	var out []string
	for _, o := range matches {
		l, r := e.v, o.v
		if s == Right {
			l, r = o.v, e.v
		}
		out = append(out, fmt.Sprintf("join %s %s %s %d", e.key, l, r, max(e.ts, o.ts)))
	}
	return out
}

func (m *intervalModel) watermark(wm int64) {
	if wm <= m.wm {
		return
	}
	m.wm = wm
	for s := range m.elems {
		m.elems[s] = slices.DeleteFunc(m.elems[s], func(e modelElem) bool {
			ct := e.ts
			if s == int(Left) && m.hi > 0 {
				ct = e.ts + m.hi
			}
			if s == int(Right) && m.lo < 0 {
				ct = e.ts - m.lo
			}
			return ct <= wm
		})
	}
}

type modelOut struct {
	key *string
	out *[]string
}

func (o modelOut) Joined(l, r string, ts int64) error {
	*o.out = append(*o.out, fmt.Sprintf("join %s %s %s %d", *o.key, l, r, ts))
	return nil
}

func (o modelOut) LateLeft(v string, ts int64) error {
	*o.out = append(*o.out, fmt.Sprintf("late left %s %d %s", *o.key, ts, v))
	return nil
}

func (o modelOut) LateRight(v string, ts int64) error {
	*o.out = append(*o.out, fmt.Sprintf("late right %s %d %s", *o.key, ts, v))
	return nil
}

// TestIntervalModel compares the interval join with the naive model over
// random histories of elements (several keys, clustered timestamps),
// rising watermarks and snapshots restored into fresh backends (the
// model keeps its elements, the operator its checkpoint: both then start
// from the watermark MIN), checking the output and the buffers.
func TestIntervalModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	for h := range 200 {
		runIntervalHistory(t, rng, h)
		if t.Failed() {
			t.Fatalf("history %d failed (seed %d)", h, seed)
		}
	}
}

func runIntervalHistory(t *testing.T, rng *rand.Rand, h int) {
	cfg := IntervalConfig{Lower: rng.Int64N(11) - 5, LowerExclusive: rng.IntN(2) == 0, UpperExclusive: rng.IntN(2) == 0}
	cfg.Upper = cfg.Lower + rng.Int64N(8)
	lo, hi, err := cfg.Bounds()
	if err != nil {
		t.Fatal(err)
	}
	m := &intervalModel{lo: lo, hi: hi, wm: math.MinInt64}
	var out []string
	var key string
	stor := state.NewMemoryStorage()
	newJoin := func(snap []state.KeyedStateHandle) (*heap.Backend, *Interval[string, string]) {
		b, err := heap.New(heap.Config{MaxParallelism: 16})
		if err != nil {
			t.Fatal(err)
		}
		if snap != nil {
			if err := b.Restore(snap, stor); err != nil {
				t.Fatal(err)
			}
		}
		j, err := NewInterval[string, string](b, cfg, codec.String(), codec.String(), modelOut{&key, &out})
		if err != nil {
			t.Fatal(err)
		}
		return b, j
	}
	b, j := newJoin(nil)
	defer func() { _ = b.Close() }()
	var snap []state.KeyedStateHandle
	var snapElems [2][]modelElem
	base := int64(0)
	for step := range 120 {
		out = out[:0]
		var want []string
		var what string
		switch r := rng.IntN(20); {
		case r < 14:
			s := Side(rng.IntN(2))
			e := modelElem{key: fmt.Sprint(rng.IntN(3)), ts: base + rng.Int64N(12) - 3, v: fmt.Sprint(step)}
			key = e.key
			b.SetCurrentKey([]byte(e.key), keygroup.ForHash(codec.Hash64([]byte(e.key)), 16))
			if s == Left {
				err = j.ProcessLeft(e.v, e.ts)
			} else {
				err = j.ProcessRight(e.v, e.ts)
			}
			want = m.element(s, e)
			what = fmt.Sprintf("%s %+v", s, e)
		case r < 18:
			base += rng.Int64N(4)
			wm := max(m.wm, base-rng.Int64N(3))
			err = j.AdvanceWatermark(wm)
			m.watermark(wm)
			what = fmt.Sprintf("watermark %d", wm)
		case r < 19:
			if err = j.Flush(); err == nil {
				var run state.KeyedSnapshotFunc
				if run, err = b.Snapshot(barrier.CheckpointID(step+1), stor); err == nil {
					var hd *state.KeyedStateHandle
					if hd, err = run(context.Background()); err == nil {
						snap = nil
						if hd != nil {
							snap = []state.KeyedStateHandle{*hd}
						}
						snapElems = [2][]modelElem{slices.Clone(m.elems[0]), slices.Clone(m.elems[1])}
					}
				}
			}
			what = "snapshot"
		default:
			if snapElems[0] == nil && snapElems[1] == nil && snap == nil {
				continue
			}
			_ = b.Close()
			b, j = newJoin(snap)
			m.elems = [2][]modelElem{slices.Clone(snapElems[0]), slices.Clone(snapElems[1])}
			m.wm = math.MinInt64
			what = "restore"
		}
		if err != nil {
			t.Fatalf("history %d (%+v) step %d %s: %v", h, cfg, step, what, err)
		}
		if !slices.Equal(out, want) {
			t.Fatalf("history %d (%+v) step %d %s:\njoin  %q\nmodel %q", h, cfg, step, what, out, want)
		}
		// The buffers hold exactly the model's elements.
		for _, s := range []Side{Left, Right} {
			var got []string
			if err := j.Buffered(s, func(k []byte, ts int64, l, r string) error {
				got = append(got, fmt.Sprintf("%s %d %s%s", k, ts, l, r))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			var exp []string
			for _, e := range m.elems[s] {
				exp = append(exp, fmt.Sprintf("%s %d %s", e.key, e.ts, e.v))
			}
			slices.Sort(got)
			slices.Sort(exp)
			if !slices.Equal(got, exp) {
				t.Fatalf("history %d (%+v) step %d %s: %s buffer\njoin  %q\nmodel %q", h, cfg, step, what, s, got, exp)
			}
		}
	}
}
