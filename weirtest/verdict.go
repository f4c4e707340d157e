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

// compare judges got against want, output by output.
func compare(atLeastOnce bool, names []string, want, got [][]Record) *Verdict {
	v := &Verdict{AtLeastOnce: atLeastOnce}
	for i, name := range names {
		compareOutput(v, name, want[i], got[i])
	}
	return v
}

func compareOutput(v *Verdict, name string, want, got []Record) {
	wn, gn := map[string]int{}, map[string]int{}
	for _, r := range want {
		wn[r.Value]++
	}
	for _, r := range got {
		gn[r.Value]++
	}
	values := make([]string, 0, len(wn)+len(gn))
	for x := range wn {
		values = append(values, x)
	}
	for x := range gn {
		if _, ok := wn[x]; !ok {
			values = append(values, x)
		}
	}
	sort.Strings(values)
	for _, x := range values {
		w, g := wn[x], gn[x]
		m := Miscount{Output: name, Value: x, Want: w, Got: g}
		switch {
		case w == g:
		case w == 0:
			v.Unexpected += g
			v.UnexpectedEx = appendEx(v.UnexpectedEx, m)
		case g < w:
			v.Lost += w - g
			v.LostEx = appendEx(v.LostEx, m)
		default:
			v.Duplicated += g - w
			v.DuplicatedEx = appendEx(v.DuplicatedEx, m)
		}
	}
	// Order, per key, where the key's values are right.
	wk, gk := byKey(want), byKey(got)
	keys := make([]string, 0, len(wk))
	for k := range wk {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w, g := wk[k], gk[k]
		if !sameValues(w, g) {
			continue // miscounted above
		}
		for i := range w {
			if w[i] != g[i] {
				v.OutOfOrder++
				if len(v.OutOfOrderEx) < maxExamples {
					v.OutOfOrderEx = append(v.OutOfOrderEx, Misorder{Output: name, Key: k, Index: i, Want: w[i], Got: g[i]})
				}
				break
			}
		}
	}
}

func appendEx(ex []Miscount, m Miscount) []Miscount {
	if len(ex) < maxExamples {
		ex = append(ex, m)
	}
	return ex
}

// byKey returns the values of the records with a key, per key, in order.
func byKey(rs []Record) map[string][]string {
	m := map[string][]string{}
	for _, r := range rs {
		if r.Key != "" {
			m[r.Key] = append(m[r.Key], r.Value)
		}
	}
	return m
}

// sameValues reports whether a and b hold the same values, in any order.
func sameValues(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	n := map[string]int{}
	for _, x := range a {
		n[x]++
	}
	for _, x := range b {
		if n[x]--; n[x] < 0 {
			return false
		}
	}
	return true
}
