package window_test

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestAgainstModel drives the scenario harness (the real core, two
// variants) and a naive model of the scenario rules with the same random
// histories, and compares their outputs command by command. The model
// keeps everything in plain maps and re-sorts its timers at every step.
func TestAgainstModel(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 50
	}
	for seed := range uint64(seeds) {
		runModelHistory(t, seed)
	}
}

type mWin struct {
	start, end int64
	global     bool
}

func (w mWin) maxTs() int64 {
	if w.global {
		return math.MaxInt64
	}
	return w.end - 1
}

func (w mWin) String() string {
	if w.global {
		return "global"
	}
	return fmt.Sprintf("[%d,%d)", w.start, w.end)
}

type mKW struct {
	key string
	w   mWin
}

type mTimer struct {
	t   int64
	key string
	w   mWin
}

type mState struct {
	contents map[mKW][]int64
	count    map[mKW]int64
	fire     map[mKW]int64
	sessions map[string][]mWin
	timers   [2]map[mTimer]bool // event, processing
}

func (s mState) clone() mState {
	c := mState{
		contents: map[mKW][]int64{},
		count:    maps.Clone(s.count),
		fire:     maps.Clone(s.fire),
		sessions: map[string][]mWin{},
		timers:   [2]map[mTimer]bool{maps.Clone(s.timers[0]), maps.Clone(s.timers[1])},
	}
	for k, v := range s.contents {
		c.contents[k] = slices.Clone(v)
	}
	for k, v := range s.sessions {
		c.sessions[k] = slices.Clone(v)
	}
	return c
}

type model struct {
	assigner                 string
	size, slide, offset, gap int64
	processing               bool
	trigger                  string // default, count, continuous
	n                        int64
	purging                  bool
	lateness                 int64
	list, side               bool

	wm, clock int64
	st        mState
	snap      *mState
	out       []string
}

func (m *model) eventTime() bool { return !m.processing && m.assigner != "global" }

func (m *model) trig() string {
	if m.trigger != "default" {
		return m.trigger
	}
	switch {
	case m.assigner == "global":
		return "never"
	case m.processing:
		return "processing"
	}
	return "event"
}

func (m *model) cleanup(w mWin) int64 {
	if !m.eventTime() {
		return w.maxTs()
	}
	if w.maxTs() > math.MaxInt64-m.lateness {
		return math.MaxInt64
	}
	return w.maxTs() + m.lateness
}

func (m *model) windowLate(w mWin) bool { return m.eventTime() && m.cleanup(w) <= m.wm }

func (m *model) elementLate(ts int64) bool {
	if !m.eventTime() {
		return false
	}
	l := ts + m.lateness
	if ts > math.MaxInt64-m.lateness {
		l = math.MaxInt64
	}
	return l <= m.wm
}

func mod(x, n int64) int64 { return ((x % n) + n) % n }

func (m *model) assign(t int64) []mWin {
	switch m.assigner {
	case "tumbling":
		s := t - mod(t-m.offset, m.size)
		return []mWin{{start: s, end: s + m.size}}
	case "sliding":
		var ws []mWin
		for s := t - mod(t-m.offset, m.slide); s > t-m.size; s -= m.slide {
			ws = append(ws, mWin{start: s, end: s + m.size})
		}
		return ws
	case "session":
		return []mWin{{start: t, end: t + m.gap}}
	}
	return []mWin{{global: true}}
}

func (m *model) setTimer(d int, key string, w mWin, t int64) {
	m.st.timers[d][mTimer{t, key, w}] = true
}
func (m *model) delTimer(d int, key string, w mWin, t int64) {
	delete(m.st.timers[d], mTimer{t, key, w})
}

func (m *model) emit(key string, w mWin) {
	c, ok := m.st.contents[mKW{key, w}]
	if !ok {
		return
	}
	var r string
	if m.list {
		s := make([]string, len(c))
		for i, v := range c {
			s[i] = strconv.FormatInt(v, 10)
		}
		r = strings.Join(s, ",")
	} else {
		var sum int64
		for _, v := range c {
			sum += v
		}
		r = strconv.FormatInt(sum, 10)
	}
	m.out = append(m.out, fmt.Sprintf("fire key=%s window=%s result=%s", key, w, r))
}

// fired turns a FIRE into FIRE_AND_PURGE for purging triggers.
func (m *model) act(key string, w mWin, fire bool) {
	if !fire {
		return
	}
	m.emit(key, w)
	if m.purging {
		delete(m.st.contents, mKW{key, w})
	}
}

func (m *model) onElement(key string, w mWin, ts int64) bool {
	kw := mKW{key, w}
	mt := w.maxTs()
	switch m.trig() {
	case "event":
		if mt <= m.wm {
			return true
		}
		m.setTimer(0, key, w, mt)
	case "processing":
		m.setTimer(1, key, w, mt)
	case "count":
		m.st.count[kw]++
		if m.st.count[kw] >= m.n {
			delete(m.st.count, kw)
			return true
		}
	case "continuous":
		if mt <= m.wm {
			return true
		}
		m.setTimer(0, key, w, mt)
		if _, ok := m.st.fire[kw]; !ok {
			f := ts - ts%m.n
			if f > math.MaxInt64-m.n {
				f = math.MaxInt64
			} else {
				f += m.n
			}
			f = min(f, mt)
			m.st.fire[kw] = f
			m.setTimer(0, key, w, f)
		}
	}
	return false
}

func (m *model) onTimer(d int, t int64, key string, w mWin) bool {
	kw := mKW{key, w}
	mt := w.maxTs()
	switch m.trig() {
	case "event":
		return d == 0 && t == mt
	case "processing":
		return d == 1
	case "continuous":
		if d != 0 {
			return false
		}
		if t == mt {
			return true
		}
		if f, ok := m.st.fire[kw]; ok && f == t {
			nf := t + m.n
			if t > math.MaxInt64-m.n {
				nf = math.MaxInt64
			}
			nf = min(nf, mt)
			m.st.fire[kw] = nf
			m.setTimer(0, key, w, nf)
			return true
		}
	}
	return false
}

func (m *model) onMerge(key string, r mWin, ms []mWin) {
	rk := mKW{key, r}
	switch m.trig() {
	case "event":
		if r.maxTs() > m.wm {
			m.setTimer(0, key, r, r.maxTs())
		}
	case "processing":
		if r.maxTs() > m.clock {
			m.setTimer(1, key, r, r.maxTs())
		}
	case "count":
		any, sum := false, int64(0)
		for _, x := range ms {
			if c, ok := m.st.count[mKW{key, x}]; ok {
				any, sum = true, sum+c
				delete(m.st.count, mKW{key, x})
			}
		}
		if any {
			m.st.count[rk] = sum
		}
	case "continuous":
		any, first := false, int64(0)
		for _, x := range ms {
			if f, ok := m.st.fire[mKW{key, x}]; ok {
				if !any || f < first {
					first = f
				}
				any = true
				delete(m.st.fire, mKW{key, x})
			}
		}
		if any {
			m.st.fire[rk] = first
			m.setTimer(0, key, r, first)
		}
	}
}

func (m *model) clearTrigger(key string, w mWin) {
	kw := mKW{key, w}
	switch m.trig() {
	case "event":
		m.delTimer(0, key, w, w.maxTs())
	case "processing":
		m.delTimer(1, key, w, w.maxTs())
	case "count":
		delete(m.st.count, kw)
	case "continuous":
		if f, ok := m.st.fire[kw]; ok {
			m.delTimer(0, key, w, f)
			delete(m.st.fire, kw)
		}
	}
}

func (m *model) cleanupTimer(set bool, key string, w mWin) {
	c := m.cleanup(w)
	if c == math.MaxInt64 {
		return
	}
	d := 1
	if m.eventTime() {
		d = 0
	}
	if set {
		m.setTimer(d, key, w, c)
	} else {
		m.delTimer(d, key, w, c)
	}
}

func (m *model) addSession(key string, n mWin) mWin {
	var ms, rest []mWin
	for _, s := range m.st.sessions[key] {
		if s.start <= n.end && s.end >= n.start {
			ms = append(ms, s)
		} else {
			rest = append(rest, s)
		}
	}
	if len(ms) == 0 {
		m.st.sessions[key] = append(m.st.sessions[key], n)
		return n
	}
	r := n
	for _, s := range ms {
		r = mWin{start: min(r.start, s.start), end: max(r.end, s.end)}
	}
	if len(ms) == 1 && ms[0] == r {
		return r
	}
	slices.SortFunc(ms, func(a, b mWin) int { return cmp.Compare(a.start, b.start) })
	m.st.sessions[key] = append(rest, r)
	m.onMerge(key, r, ms)
	for _, s := range ms {
		m.clearTrigger(key, s)
		m.cleanupTimer(false, key, s)
	}
	var merged []int64
	any := false
	for _, s := range ms {
		if c, ok := m.st.contents[mKW{key, s}]; ok {
			any = true
			merged = append(merged, c...)
			delete(m.st.contents, mKW{key, s})
		}
	}
	if any {
		m.st.contents[mKW{key, r}] = merged
	} else {
		delete(m.st.contents, mKW{key, r})
	}
	return r
}

func (m *model) removeSession(key string, w mWin) {
	m.st.sessions[key] = slices.DeleteFunc(m.st.sessions[key], func(s mWin) bool { return s == w })
}

func (m *model) element(key string, ts, v int64) {
	t := ts
	if m.processing {
		t = m.clock
	}
	taken := false
	for _, w := range m.assign(t) {
		if m.assigner == "session" {
			w = m.addSession(key, w)
		}
		if m.windowLate(w) {
			if m.assigner == "session" {
				m.removeSession(key, w)
				delete(m.st.contents, mKW{key, w})
			}
			continue
		}
		taken = true
		m.st.contents[mKW{key, w}] = append(m.st.contents[mKW{key, w}], v)
		m.act(key, w, m.onElement(key, w, ts))
		m.cleanupTimer(true, key, w)
	}
	if !taken && m.elementLate(ts) {
		if m.side {
			m.out = append(m.out, fmt.Sprintf("late key=%s ts=%d v=%d", key, ts, v))
		} else {
			m.out = append(m.out, fmt.Sprintf("dropped key=%s ts=%d v=%d", key, ts, v))
		}
	}
}

func (m *model) advance(d int, t int64) {
	if d == 0 {
		m.wm = t
	} else {
		m.clock = t
	}
	for {
		var due []mTimer
		for tm := range m.st.timers[d] {
			if tm.t <= t {
				due = append(due, tm)
			}
		}
		if len(due) == 0 {
			return
		}
		tm := slices.MinFunc(due, func(a, b mTimer) int {
			return cmp.Or(cmp.Compare(a.t, b.t), strings.Compare(a.key, b.key),
				cmp.Compare(a.w.start, b.w.start), cmp.Compare(a.w.end, b.w.end))
		})
		delete(m.st.timers[d], tm)
		if m.assigner == "session" && !slices.Contains(m.st.sessions[tm.key], tm.w) {
			continue
		}
		m.act(tm.key, tm.w, m.onTimer(d, tm.t, tm.key, tm.w))
		if (d == 0) == m.eventTime() && tm.t == m.cleanup(tm.w) {
			delete(m.st.contents, mKW{tm.key, tm.w})
			m.clearTrigger(tm.key, tm.w)
			if m.assigner == "session" {
				m.removeSession(tm.key, tm.w)
			}
		}
	}
}

// runModelHistory builds a random configuration and history and checks
// that the harness and the model print the same.
func runModelHistory(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	m := &model{wm: math.MinInt64}
	m.st = mState{contents: map[mKW][]int64{}, count: map[mKW]int64{}, fire: map[mKW]int64{},
		sessions: map[string][]mWin{}, timers: [2]map[mTimer]bool{{}, {}}}
	newArgs := map[string]string{}
	m.assigner = []string{"tumbling", "sliding", "session", "global"}[rng.IntN(4)]
	newArgs["assigner"] = m.assigner
	switch m.assigner {
	case "tumbling":
		m.size = 1 + rng.Int64N(20)
		m.offset = rng.Int64N(2*m.size-1) - (m.size - 1)
		newArgs["size"], newArgs["offset"] = fmt.Sprint(m.size), fmt.Sprint(m.offset)
	case "sliding":
		m.size, m.slide = 1+rng.Int64N(20), 1+rng.Int64N(10)
		m.offset = rng.Int64N(2*m.slide-1) - (m.slide - 1)
		newArgs["size"], newArgs["slide"], newArgs["offset"] = fmt.Sprint(m.size), fmt.Sprint(m.slide), fmt.Sprint(m.offset)
	case "session":
		m.gap = 1 + rng.Int64N(10)
		newArgs["gap"] = fmt.Sprint(m.gap)
	}
	if m.assigner != "global" && rng.IntN(3) == 0 {
		m.processing = true
		newArgs["time"] = "processing"
	}
	m.trigger = "default"
	switch r := rng.IntN(6); {
	case r < 3:
	case r < 5:
		m.trigger, m.n = "count", 1+rng.Int64N(4)
	default:
		if !m.processing {
			m.trigger, m.n = "continuous", 1+rng.Int64N(8)
		}
	}
	m.purging = rng.IntN(3) == 0
	trig := m.trigger
	if m.n > 0 {
		trig = fmt.Sprintf("%s:%d", m.trigger, m.n)
	}
	if m.purging {
		trig = "purging-" + trig
	}
	newArgs["trigger"] = trig
	m.lateness = []int64{0, 0, 3, 15, math.MaxInt64}[rng.IntN(5)]
	newArgs["lateness"] = fmt.Sprint(m.lateness)
	m.list = rng.IntN(2) == 0
	newArgs["function"] = map[bool]string{true: "list", false: "sum"}[m.list]
	m.side = rng.IntN(2) == 0
	newArgs["sideoutput"] = map[bool]string{true: "on", false: "off"}[m.side]

	var history []string
	td := func(cmd string, args map[string]string) *datadriven.TestData {
		d := &datadriven.TestData{Pos: fmt.Sprintf("model seed %d", seed), Cmd: cmd}
		var line []string
		for _, k := range slices.Sorted(maps.Keys(args)) {
			d.CmdArgs = append(d.CmdArgs, datadriven.CmdArg{Key: k, Vals: []string{args[k]}})
			line = append(line, k+"="+args[k])
		}
		history = append(history, strings.TrimSpace(cmd+" "+strings.Join(line, " ")))
		return d
	}
	d := td("new", newArgs)
	h := newHarness(t, d, parseArgs(t, d), map[string]int64{"a": 0, "b": 1, "c": 2})
	var runnerWM int64 = math.MinInt64
	for step := range 60 {
		var d *datadriven.TestData
		switch r := rng.IntN(20); {
		case r < 12:
			key := []string{"a", "b", "c"}[rng.IntN(3)]
			ts := rng.Int64N(120) - 20
			v := rng.Int64N(10)
			m.element(key, ts, v)
			d = td("element", map[string]string{"key": key, "ts": fmt.Sprint(ts), "v": fmt.Sprint(v)})
		case r < 15:
			wm := max(runnerWM, -30) + rng.Int64N(25)
			runnerWM = wm
			m.advance(0, wm)
			d = td("watermark", map[string]string{"ts": fmt.Sprint(wm)})
		case r < 18:
			now := m.clock + rng.Int64N(15)
			m.advance(1, now)
			d = td("proctime", map[string]string{"ts": fmt.Sprint(now)})
		case r < 19:
			s := m.st.clone()
			m.snap = &s
			d = td("snapshot", nil)
		default:
			if m.snap == nil {
				continue
			}
			m.st = m.snap.clone()
			m.wm = math.MinInt64
			runnerWM = math.MinInt64
			d = td("restore", nil)
		}
		got := h.run(t, d, parseArgs(t, d))
		want := "ok\n"
		if len(m.out) > 0 {
			want = strings.Join(m.out, "\n") + "\n"
		}
		m.out = m.out[:0]
		if got != want {
			t.Fatalf("seed %d step %d: the core and the model disagree\nhistory:\n%s\ncore:\n%smodel:\n%s",
				seed, step, strings.Join(history, "\n"), got, want)
		}
	}
}
