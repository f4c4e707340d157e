package async_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/weirstream/weir/eventtime/async"
)

// TestScenarios runs every testdata/*.txt transcript through the real
// queue, in the format of docs/async-scenarios.md.
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if filepath.Ext(path) != ".txt" {
			t.Skipf("%s is not a scenario file", path)
		}
		var h *harness
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			a := parseArgs(t, d)
			if d.Cmd == "new" {
				cfg, err := a.config(t, d, async.Config{})
				a.done(t, d)
				if err != nil {
					h = nil
					return "error: " + err.Error() + "\n"
				}
				h = newHarness(t, d, cfg)
				return "ok\n"
			}
			if h == nil {
				d.Fatalf(t, "%s before new (or after a new that failed)", d.Cmd)
			}
			return h.run(t, d, a)
		})
	})
}

type harness struct {
	q        *async.Queue[string, string]
	cfg      async.Config
	now      int64
	current  map[string]*request // value → its request, nil while it waits
	first    map[string]async.ID // value → the ID of its request before it timed out
	snapshot []async.Element[string]
	hasSnap  bool
	full     bool
}

func newHarness(t *testing.T, d *datadriven.TestData, cfg async.Config) *harness {
	q, err := async.New[string, string](cfg)
	if err != nil {
		d.Fatalf(t, "new: %v", err)
	}
	return &harness{q: q, cfg: cfg, current: map[string]*request{}, first: map[string]async.ID{}}
}

// request is the request of an element in the queue.
type request struct{ id async.ID }

func (h *harness) run(t *testing.T, d *datadriven.TestData, a args) string {
	var b strings.Builder
	switch d.Cmd {
	case "element":
		v := a.name(t, d, "v")
		ts := a.int(t, d, "ts")
		a.done(t, d)
		for _, e := range h.q.Entries(nil) {
			if !e.Watermark && e.Value == v {
				d.Fatalf(t, "element v=%s is in the queue already", v)
			}
		}
		h.current[v] = nil
		h.q.Add(v, ts, h.now)
	case "watermark":
		ts := a.int(t, d, "ts")
		a.done(t, d)
		h.q.Watermark(ts)
	case "complete":
		v := a.name(t, d, "v")
		out := a.name(t, d, "out")
		a.done(t, d)
		r := h.current[v]
		if r == nil {
			d.Fatalf(t, "complete v=%s: no request of it was issued", v)
		}
		if !h.q.Complete(r.id, out, h.now) {
			d.Fatalf(t, "complete v=%s: the queue does not know its request", v)
		}
	case "late":
		v := a.name(t, d, "v")
		out := a.name(t, d, "out")
		a.done(t, d)
		id, ok := h.first[v]
		if !ok {
			d.Fatalf(t, "late v=%s: its request did not time out", v)
		}
		if h.q.Complete(id, out, h.now) {
			d.Fatalf(t, "late v=%s: the queue took the late result", v)
		}
		b.WriteString("ignored\n")
	case "time":
		now := a.int(t, d, "now")
		a.done(t, d)
		if now < h.now {
			d.Fatalf(t, "time now=%d: the processing time is %d already", now, h.now)
		}
		h.now = now
		for _, r := range h.q.Timeout(now, nil) {
			v := r.Value
			h.first[v] = h.current[v].id
			h.current[v] = &request{id: r.ID}
			fmt.Fprintf(&b, "timeout v=%s ts=%d\n", v, r.Timestamp)
		}
	case "snapshot":
		a.done(t, d)
		h.snapshot, h.hasSnap = h.q.Snapshot(nil), true
		for _, e := range h.snapshot {
			fmt.Fprintf(&b, "element v=%s ts=%d\n", e.Value, e.Timestamp)
		}
		if len(h.snapshot) == 0 {
			b.WriteString("empty\n")
		}
		return b.String()
	case "restore":
		if !h.hasSnap {
			d.Fatalf(t, "restore before any snapshot")
		}
		cfg, err := a.config(t, d, h.cfg)
		a.done(t, d)
		if err != nil {
			d.Fatalf(t, "restore: %v", err)
		}
		q, err := async.New[string, string](cfg)
		if err != nil {
			d.Fatalf(t, "restore: %v", err)
		}
		h.q, h.cfg, h.full = q, cfg, false
		h.current, h.first = map[string]*request{}, map[string]async.ID{}
		for _, e := range h.snapshot {
			h.current[e.Value] = nil
			h.q.Add(e.Value, e.Timestamp, h.now)
		}
	case "state":
		a.done(t, d)
		es := h.q.Entries(nil)
		for _, e := range es {
			switch {
			case e.Watermark:
				fmt.Fprintf(&b, "watermark ts=%d\n", e.Timestamp)
			case e.Status == async.InFlight && h.cfg.Timeout > 0:
				fmt.Fprintf(&b, "%s v=%s ts=%d deadline=%d\n", e.Status, e.Value, e.Timestamp, e.Deadline)
			case e.Status == async.Done:
				fmt.Fprintf(&b, "%s v=%s ts=%d out=%s\n", e.Status, e.Value, e.Timestamp, e.Result)
			default:
				fmt.Fprintf(&b, "%s v=%s ts=%d\n", e.Status, e.Value, e.Timestamp)
			}
		}
		if len(es) == 0 {
			b.WriteString("empty\n")
		}
		return b.String()
	default:
		d.Fatalf(t, "unknown command %s", d.Cmd)
	}
	h.drain(&b)
	if b.Len() == 0 {
		return "ok\n"
	}
	return b.String()
}

// drain prints what the last command made leave the queue, what it
// issued, and a change of back-pressure.
func (h *harness) drain(b *strings.Builder) {
	for _, o := range h.q.TakeOut(nil) {
		if o.Watermark {
			fmt.Fprintf(b, "watermark ts=%d\n", o.Timestamp)
			continue
		}
		fmt.Fprintf(b, "emit out=%s ts=%d\n", o.Value, o.Timestamp)
	}
	for _, r := range h.q.TakeIssued(nil) {
		h.current[r.Value] = &request{id: r.ID}
		if h.cfg.Timeout > 0 {
			fmt.Fprintf(b, "issue v=%s ts=%d deadline=%d\n", r.Value, r.Timestamp, r.Deadline)
		} else {
			fmt.Fprintf(b, "issue v=%s ts=%d\n", r.Value, r.Timestamp)
		}
	}
	if full := h.q.Full(); full != h.full {
		h.full = full
		if full {
			b.WriteString("backpressure on\n")
		} else {
			b.WriteString("backpressure off\n")
		}
	}
}

var (
	numberRE = regexp.MustCompile(`^-?[0-9]+$`)
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
)

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

func (a args) done(t *testing.T, d *datadriven.TestData) {
	for k := range a {
		d.Fatalf(t, "%s: unknown argument %s", d.Cmd, k)
	}
}

func (a args) name(t *testing.T, d *datadriven.TestData, name string) string {
	v, ok := a.take(name)
	if !ok {
		d.Fatalf(t, "%s: missing argument %s=", d.Cmd, name)
	}
	if !nameRE.MatchString(v) {
		d.Fatalf(t, "%s=%s: not a name", name, v)
	}
	return v
}

func (a args) int(t *testing.T, d *datadriven.TestData, name string) int64 {
	v, ok := a.take(name)
	if !ok {
		d.Fatalf(t, "%s: missing argument %s=", d.Cmd, name)
	}
	return parseInt(t, d, name, v)
}

func parseInt(t *testing.T, d *datadriven.TestData, name, s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if !numberRE.MatchString(s) || err != nil || strconv.FormatInt(n, 10) != s {
		d.Fatalf(t, "%s=%s: not a signed 64-bit decimal integer in canonical form", name, s)
	}
	return n
}

// config reads the optional capacity=, mode= and timeout= over base.
func (a args) config(t *testing.T, d *datadriven.TestData, base async.Config) (async.Config, error) {
	cfg := base
	if v, ok := a.take("capacity"); ok {
		cfg.Capacity = int(parseInt(t, d, "capacity", v))
	}
	if v, ok := a.take("mode"); ok {
		switch v {
		case "ordered":
			cfg.Mode = async.Ordered
		case "unordered":
			cfg.Mode = async.Unordered
		default:
			d.Fatalf(t, "mode=%s: want ordered or unordered", v)
		}
	}
	if v, ok := a.take("timeout"); ok {
		cfg.Timeout = parseInt(t, d, "timeout", v)
	}
	return cfg, cfg.Validate()
}
