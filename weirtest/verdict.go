package weirtest

import (
	"fmt"
	"sort"
	"strings"
)

// Record is one value of a job's committed output, as a checker compares
// it: Value is the value rendered as text; Key is its order scope (the
// records of one key must keep the fault-free run's order; "": no order
// is checked).
type Record struct {
	Key, Value string
}

// maxExamples bounds the examples a verdict lists per kind of error.
const maxExamples = 5

// Miscount is a value that a run's output holds a wrong number of times.
type Miscount struct {
	Output, Value string
	Want, Got     int
}

func (m Miscount) String() string {
	return fmt.Sprintf("%s: %q ×%d, want ×%d", m.Output, m.Value, m.Got, m.Want)
}

// Misorder is the first place where a key's records differ in order from
// the fault-free run's.
type Misorder struct {
	Output, Key string
	Index       int // position among the key's records
	Want, Got   string
}

func (m Misorder) String() string {
	return fmt.Sprintf("%s: key %q record %d is %q, want %q", m.Output, m.Key, m.Index, m.Got, m.Want)
}

// Verdict compares a run's committed output with the fault-free run's.
// Lost values are fewer than in the fault-free run (or missing),
// duplicated ones more, unexpected ones absent from it (a wrong result);
// the counts are over all values, the slices hold a few examples.
type Verdict struct {
	Lost, Duplicated, Unexpected       int
	LostEx, DuplicatedEx, UnexpectedEx []Miscount
	OutOfOrder                         int
	OutOfOrderEx                       []Misorder
	AtLeastOnce                        bool // only losses fail the verdict
}

// OK reports whether the output is correct for the guarantee.
func (v *Verdict) OK() bool {
	if v.AtLeastOnce {
		return v.Lost == 0
	}
	return v.Lost == 0 && v.Duplicated == 0 && v.Unexpected == 0 && v.OutOfOrder == 0
}

// String describes what is wrong, with examples.
func (v *Verdict) String() string {
	if v.Lost+v.Duplicated+v.Unexpected+v.OutOfOrder == 0 {
		return "output matches the fault-free run"
	}
	var b strings.Builder
	part := func(what string, n int, ex []Miscount) {
		if n == 0 {
			return
		}
		fmt.Fprintf(&b, "%d %s", n, what)
		for _, e := range ex {
			fmt.Fprintf(&b, "\n\t%v", e)
		}
		b.WriteString("\n")
	}
	part("lost", v.Lost, v.LostEx)
	part("duplicated", v.Duplicated, v.DuplicatedEx)
	part("unexpected (not in the fault-free output)", v.Unexpected, v.UnexpectedEx)
	if v.OutOfOrder > 0 {
		fmt.Fprintf(&b, "%d keys out of order", v.OutOfOrder)
		for _, e := range v.OutOfOrderEx {
			fmt.Fprintf(&b, "\n\t%v", e)
		}
		b.WriteString("\n")
	}
	if v.AtLeastOnce {
		b.WriteString("(at-least-once: only losses count)\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Summary is a one-word verdict for tables.
func (v *Verdict) Summary() string {
	if v.Lost+v.Duplicated+v.Unexpected+v.OutOfOrder == 0 {
		return "ok"
	}
	var parts []string
	for _, p := range []struct {
		n    int
		what string
	}{{v.Lost, "lost"}, {v.Duplicated, "dup"}, {v.Unexpected, "wrong"}, {v.OutOfOrder, "order"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	s := strings.Join(parts, ", ")
	if v.OK() {
		s += " (allowed)"
	}
	return s
}

// expected is a fault-free output prepared for comparisons: each value's
// count and each key's values in order.
type expected struct {
	counts map[string]int
	byKey  map[string][]string
}

// expect prepares the fault-free outputs.
func expect(outs [][]Record) []*expected {
	es := make([]*expected, len(outs))
	for i, rs := range outs {
		e := &expected{counts: make(map[string]int, len(rs)), byKey: map[string][]string{}}
		for _, r := range rs {
			e.counts[r.Value]++
			if r.Key != "" {
				e.byKey[r.Key] = append(e.byKey[r.Key], r.Value)
			}
		}
		es[i] = e
	}
	return es
}

// compare judges got against want, output by output.
func compare(atLeastOnce bool, names []string, want []*expected, got [][]Record) *Verdict {
	v := &Verdict{AtLeastOnce: atLeastOnce}
	for i, name := range names {
		compareOutput(v, name, want[i], got[i])
	}
	return v
}

func compareOutput(v *Verdict, name string, want *expected, got []Record) {
	gn := make(map[string]int, len(want.counts))
	for _, r := range got {
		gn[r.Value]++
	}
	var bad []Miscount
	for x, w := range want.counts {
		if g := gn[x]; g != w {
			bad = append(bad, Miscount{Output: name, Value: x, Want: w, Got: g})
		}
	}
	for x, g := range gn {
		if _, ok := want.counts[x]; !ok {
			bad = append(bad, Miscount{Output: name, Value: x, Got: g})
		}
	}
	sort.Slice(bad, func(i, j int) bool { return bad[i].Value < bad[j].Value })
	miscounted := make(map[string]bool, len(bad))
	for _, m := range bad {
		miscounted[m.Value] = true
		switch {
		case m.Want == 0:
			v.Unexpected += m.Got
			v.UnexpectedEx = appendEx(v.UnexpectedEx, m)
		case m.Got < m.Want:
			v.Lost += m.Want - m.Got
			v.LostEx = appendEx(v.LostEx, m)
		default:
			v.Duplicated += m.Got - m.Want
			v.DuplicatedEx = appendEx(v.DuplicatedEx, m)
		}
	}
	if len(want.byKey) == 0 {
		return
	}
	// Order, per key whose values are all counted right: the first record
	// that differs from the fault-free run's at its position.
	skip := map[string]bool{}
	if len(bad) > 0 {
		for _, r := range got {
			if miscounted[r.Value] {
				skip[r.Key] = true
			}
		}
		for k, vs := range want.byKey {
			for _, x := range vs {
				if miscounted[x] {
					skip[k] = true
					break
				}
			}
		}
	}
	pos := make(map[string]int, len(want.byKey))
	var misordered []Misorder
	done := map[string]bool{}
	for _, r := range got {
		if r.Key == "" || skip[r.Key] || done[r.Key] {
			continue
		}
		i := pos[r.Key]
		pos[r.Key]++
		if w := want.byKey[r.Key]; i < len(w) && w[i] != r.Value {
			done[r.Key] = true
			misordered = append(misordered, Misorder{Output: name, Key: r.Key, Index: i, Want: w[i], Got: r.Value})
		}
	}
	sort.Slice(misordered, func(i, j int) bool { return misordered[i].Key < misordered[j].Key })
	v.OutOfOrder += len(misordered)
	for _, m := range misordered {
		if len(v.OutOfOrderEx) < maxExamples {
			v.OutOfOrderEx = append(v.OutOfOrderEx, m)
		}
	}
}

func appendEx(ex []Miscount, m Miscount) []Miscount {
	if len(ex) < maxExamples {
		ex = append(ex, m)
	}
	return ex
}
