package join

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestJoinScenarios runs every testdata/join/*.txt file through the real
// two-input cores, as docs/join-scenarios.md describes: each `new op=…`
// starts a fresh core of that op, which then runs the commands up to the
// next `new`. A malformed or invalid command fails the test.
func TestJoinScenarios(t *testing.T) {
	datadriven.Walk(t, filepath.Join("testdata", "join"), func(t *testing.T, path string) {
		if filepath.Ext(path) != ".txt" {
			t.Skipf("%s is not a scenario file", path)
		}
		var cur scenario // nil before the first new, or after a new that failed
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Input != "" {
				d.Fatalf(t, "%s takes no input lines, got %q", d.Cmd, d.Input)
			}
			a := parseArgs(t, d)
			if d.Cmd == "new" {
				op := a.str("op")
				newOp, ok := scenarioOps[op]
				if !ok {
					d.Fatalf(t, "new: unknown op=%s (want interval, watermarks or broadcast)", op)
				}
				var out string
				cur, out = newOp(t, d, a)
				a.done()
				return out
			}
			if cur == nil {
				d.Fatalf(t, "%s before new, or after a new that failed", d.Cmd)
			}
			out := cur.run(t, d, a)
			a.done()
			return out
		})
	})
}

// scenario is one op's core between two `new` commands.
type scenario interface {
	// run runs one command (not new) and returns its output lines, or
	// "ok\n" when it emitted nothing; it fails the test on invalid input.
	run(t *testing.T, d *datadriven.TestData, a *args) string
}

// scenarioOps makes the core of each op from its `new` command; it returns
// nil and the error line when the core refuses to be built.
var scenarioOps = map[string]func(t *testing.T, d *datadriven.TestData, a *args) (scenario, string){
	"interval":   newIntervalScenario,
	"watermarks": newWatermarksScenario,
	"broadcast":  newBroadcastScenario,
}

// output renders emitted lines: "ok" when there are none.
func output(lines []string) string {
	if len(lines) == 0 {
		return "ok\n"
	}
	var s string
	for _, l := range lines {
		s += l + "\n"
	}
	return s
}

// args are a command's arguments: name=value pairs, each at most once,
// and bare words. Every one must be read (done checks).
type args struct {
	t    *testing.T
	d    *datadriven.TestData
	vals map[string]string
	bare map[string]bool
	used map[string]bool
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

func parseArgs(t *testing.T, d *datadriven.TestData) *args {
	t.Helper()
	a := &args{t: t, d: d, vals: map[string]string{}, bare: map[string]bool{}, used: map[string]bool{}}
	for _, ca := range d.CmdArgs {
		if _, dup := a.vals[ca.Key]; dup || a.bare[ca.Key] {
			d.Fatalf(t, "%s: argument %s given twice", d.Cmd, ca.Key)
		}
		switch len(ca.Vals) {
		case 0:
			a.bare[ca.Key] = true
		case 1:
			a.vals[ca.Key] = ca.Vals[0]
		default:
			d.Fatalf(t, "%s: argument %s has %d values", d.Cmd, ca.Key, len(ca.Vals))
		}
	}
	return a
}

func (a *args) fatalf(format string, v ...any) {
	a.t.Helper()
	a.d.Fatalf(a.t, "%s: %s", a.d.Cmd, fmt.Sprintf(format, v...))
}

// has reports whether name=value was given.
func (a *args) has(name string) bool {
	_, ok := a.vals[name]
	return ok
}

// str returns the value of the required argument name.
func (a *args) str(name string) string {
	a.t.Helper()
	v, ok := a.vals[name]
	if !ok {
		a.fatalf("missing argument %s=", name)
	}
	a.used[name] = true
	return v
}

// name returns the required argument name, a key or name: ASCII letters,
// digits, '_', '.', '-'.
func (a *args) name(name string) string {
	a.t.Helper()
	v := a.str(name)
	if !nameRE.MatchString(v) {
		a.fatalf("%s=%q is not a name (ASCII letters, digits, _ . -)", name, v)
	}
	return v
}

// int64 returns the required argument name, a signed 64-bit decimal
// integer in canonical form.
func (a *args) int64(name string) int64 {
	a.t.Helper()
	return a.number(name, a.str(name))
}

func (a *args) number(name, s string) int64 {
	a.t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != s {
		a.fatalf("%s=%s is not a signed 64-bit decimal integer in canonical form", name, s)
	}
	return n
}

// optInt64 returns the optional argument name, or def.
func (a *args) optInt64(name string, def int64) int64 {
	a.t.Helper()
	if !a.has(name) {
		return def
	}
	return a.int64(name)
}

// optBool returns the optional argument name (true or false), or def.
func (a *args) optBool(name string, def bool) bool {
	a.t.Helper()
	if !a.has(name) {
		return def
	}
	switch v := a.str(name); v {
	case "true":
		return true
	case "false":
		return false
	default:
		a.fatalf("%s=%s: want true or false", name, v)
	}
	return false
}

// word returns the one bare word, which must be one of choices.
func (a *args) word(choices ...string) string {
	a.t.Helper()
	var got string
	for w := range a.bare {
		if got != "" {
			a.fatalf("more than one bare word")
		}
		got = w
	}
	for _, c := range choices {
		if got == c {
			a.used[got] = true
			return got
		}
	}
	a.fatalf("want one bare word of %v, got %q", choices, got)
	return ""
}

// done fails the test on arguments nobody read: unknown to the command.
func (a *args) done() {
	a.t.Helper()
	for k := range a.vals {
		if !a.used[k] {
			a.fatalf("unknown argument %s=", k)
		}
	}
	for k := range a.bare {
		if !a.used[k] {
			a.fatalf("unknown word %s", k)
		}
	}
}
