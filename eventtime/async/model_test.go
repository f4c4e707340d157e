package async_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/eventtime/async"
)

// model is a naive async queue: one list of the elements and watermarks
// not yet emitted, in input order, rescanned after every step.
type model struct {
	cfg      async.Config
	items    []*mitem
	seq      int // completion counter
	issued   []int
	out      []string
	timedOut []int
}

type mitem struct {
	wm       bool
	v        int // the element's value, or the watermark
	ts       int64
	status   async.Status
	deadline int64
	done     int // completion order
	out      int
}

func (m *model) admitted() int {
	n := 0
	for _, it := range m.items {
		if !it.wm && it.status != async.Waiting {
			n++
		}
	}
	return n
}

func (m *model) full() bool {
	for _, it := range m.items {
		if !it.wm && it.status == async.Waiting {
			return true
		}
	}
	return m.admitted() == m.cfg.Capacity
}

func (m *model) add(v int, ts, now int64) {
	m.items = append(m.items, &mitem{v: v, ts: ts, status: async.Waiting})
	m.settle(now)
}

func (m *model) watermark(wm int64, now int64) {
	if n := len(m.items); n > 0 && m.items[n-1].wm {
		m.items[n-1].v = int(wm)
	} else {
		m.items = append(m.items, &mitem{wm: true, v: int(wm)})
	}
	m.settle(now)
}

func (m *model) complete(it *mitem, out int, now int64) {
	m.seq++
	it.status, it.done, it.out = async.Done, m.seq, out
	m.settle(now)
}

func (m *model) timeout(now int64) {
	var due []*mitem
	for _, it := range m.items {
		if !it.wm && it.status == async.InFlight && m.cfg.Timeout > 0 && it.deadline <= now {
			due = append(due, it)
		}
	}
	// issue order is input order among admitted elements
	for _, it := range due {
		it.status = async.TimedOut
		m.timedOut = append(m.timedOut, it.v)
	}
}

// settle emits and admits until nothing changes.
func (m *model) settle(now int64) {
	for {
		changed := m.emit()
		// admit waiting elements in order while there is room
		for _, it := range m.items {
			if it.wm || it.status != async.Waiting {
				continue
			}
			if m.admitted() == m.cfg.Capacity {
				break
			}
			it.status = async.InFlight
			it.deadline = 1<<63 - 1
			if m.cfg.Timeout > 0 {
				it.deadline = now + m.cfg.Timeout
				if now > 1<<63-1-m.cfg.Timeout {
					it.deadline = 1<<63 - 1
				}
			}
			m.issued = append(m.issued, it.v)
			changed = true
		}
		if !changed {
			return
		}
	}
}

func (m *model) emit() bool {
	changed := false
	if m.cfg.Mode == async.Ordered {
		for len(m.items) > 0 {
			it := m.items[0]
			if it.wm {
				m.out = append(m.out, fmt.Sprintf("wm %d", it.v))
			} else if it.status == async.Done {
				m.out = append(m.out, fmt.Sprintf("rec %d@%d", it.out, it.ts))
			} else {
				break
			}
			m.items = m.items[1:]
			changed = true
		}
		return changed
	}
	for {
		k := slices.IndexFunc(m.items, func(it *mitem) bool { return it.wm })
		if k < 0 {
			k = len(m.items)
		}
		var done []*mitem
		for _, it := range m.items[:k] {
			if it.status == async.Done {
				done = append(done, it)
			}
		}
		slices.SortFunc(done, func(a, b *mitem) int { return a.done - b.done })
		for _, it := range done {
			m.out = append(m.out, fmt.Sprintf("rec %d@%d", it.out, it.ts))
			changed = true
		}
		m.items = slices.DeleteFunc(m.items, func(it *mitem) bool { return slices.Contains(done, it) })
		k -= len(done)
		if k == 0 && len(m.items) > 0 {
			m.out = append(m.out, fmt.Sprintf("wm %d", m.items[0].v))
			m.items = m.items[1:]
			changed = true
			continue
		}
		return changed
	}
}

func (m *model) snapshot() []async.Element[int] {
	var els []async.Element[int]
	for _, it := range m.items {
		if !it.wm {
			els = append(els, async.Element[int]{Value: it.v, Timestamp: it.ts})
		}
	}
	return els
}

// TestModel compares the queue with the model over random histories:
// elements, watermarks, completions in any order, timeouts with fallbacks,
// late results, snapshots restored into queues of other capacities and
// modes.
func TestModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	for h := range 1000 {
		runModelHistory(t, rng, h)
		if t.Failed() {
			t.Fatalf("history %d failed (seed %d)", h, seed)
		}
	}
}

func randomConfig(rng *rand.Rand) async.Config {
	cfg := async.Config{Capacity: 1 + rng.IntN(5), Mode: async.Mode(rng.IntN(2))}
	if rng.IntN(2) == 0 {
		cfg.Timeout = 1 + rng.Int64N(20)
	}
	return cfg
}

func runModelHistory(t *testing.T, rng *rand.Rand, h int) {
	cfg := randomConfig(rng)
	q, err := async.New[int, int](cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &model{cfg: cfg}
	ids := map[int]async.ID{}   // value → current request
	stale := map[int]async.ID{} // value → a request that timed out
	var now, wm int64
	next := 0
	var log []string
	check := func(what string) {
		log = append(log, what)
		var out []string
		for _, o := range q.TakeOut(nil) {
			if o.Watermark {
				out = append(out, fmt.Sprintf("wm %d", o.Timestamp))
			} else {
				out = append(out, fmt.Sprintf("rec %d@%d", o.Value, o.Timestamp))
			}
		}
		var issued []int
		for _, r := range q.TakeIssued(nil) {
			ids[r.Value] = r.ID
			issued = append(issued, r.Value)
		}
		if !slices.Equal(out, m.out) || !slices.Equal(issued, m.issued) || q.Full() != m.full() ||
			!slices.Equal(q.Snapshot(nil), m.snapshot()) {
			t.Errorf("history %d (%+v) after %v:\nqueue out %v issued %v full %v snapshot %v\nmodel out %v issued %v full %v snapshot %v",
				h, cfg, log, out, issued, q.Full(), q.Snapshot(nil), m.out, m.issued, m.full(), m.snapshot())
		}
		m.out, m.issued = nil, nil
	}
	for step := 0; step < 60 && !t.Failed(); step++ {
		switch r := rng.IntN(10); {
		case r < 3:
			v := next
			next++
			ts := rng.Int64N(100)
			q.Add(v, ts, now)
			m.add(v, ts, now)
			check(fmt.Sprintf("add %d", v))
		case r < 4:
			wm += rng.Int64N(3)
			q.Watermark(wm)
			m.watermark(wm, now)
			check(fmt.Sprintf("wm %d", wm))
		case r < 7:
			// complete a random element in flight or timed out
			var cands []*mitem
			for _, it := range m.items {
				if !it.wm && (it.status == async.InFlight || it.status == async.TimedOut) {
					cands = append(cands, it)
				}
			}
			if len(cands) == 0 {
				continue
			}
			it := cands[rng.IntN(len(cands))]
			out := it.v*10 + rng.IntN(10)
			if !q.Complete(ids[it.v], out, now) {
				t.Fatalf("history %d: complete %d refused", h, it.v)
			}
			m.complete(it, out, now)
			check(fmt.Sprintf("complete %d", it.v))
		case r < 8:
			now += rng.Int64N(8)
			got := q.Timeout(now, nil)
			m.timeout(now)
			var vs []int
			for _, r := range got {
				stale[r.Value] = ids[r.Value]
				ids[r.Value] = r.ID
				vs = append(vs, r.Value)
			}
			if !slices.Equal(vs, m.timedOut) {
				t.Errorf("history %d after %v: timed out %v, model %v", h, log, vs, m.timedOut)
			}
			m.timedOut = nil
			check(fmt.Sprintf("time %d", now))
		case r < 9:
			// a late result of a request that timed out is ignored
			for v, id := range stale {
				if q.Complete(id, -1, now) {
					t.Fatalf("history %d: late result of %d taken", h, v)
				}
				delete(stale, v)
				break
			}
			check("late")
		default:
			els := q.Snapshot(nil)
			cfg = randomConfig(rng)
			q, _ = async.New[int, int](cfg)
			m = &model{cfg: cfg}
			ids, stale = map[int]async.ID{}, map[int]async.ID{}
			for _, e := range els {
				q.Add(e.Value, e.Timestamp, now)
				m.add(e.Value, e.Timestamp, now)
			}
			check(fmt.Sprintf("restore %+v", cfg))
		}
	}
}
