package eventtime

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestValveScenarios runs every testdata/valve/*.txt file through a real
// Valve. The format is described in docs/watermark-scenarios.md.
func TestValveScenarios(t *testing.T) {
	datadriven.Walk(t, filepath.Join("testdata", "valve"), func(t *testing.T, path string) {
		if filepath.Ext(path) != ".txt" {
			t.Skipf("%s is not a scenario file", path)
		}
		var v *Valve
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return runValveCommand(t, d, &v)
		})
	})
}

// runValveCommand runs one scenario command against *v (replacing it on
// new) and returns what the valve emitted. Anything malformed fails the
// test: it is a bug in the scenario, not valve behaviour.
func runValveCommand(t *testing.T, d *datadriven.TestData, v **Valve) string {
	t.Helper()
	if d.Input != "" {
		d.Fatalf(t, "%s takes no input lines, got %q", d.Cmd, d.Input)
	}
	if d.Cmd == "new" {
		args := scenarioArgs(t, d, "channels")
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 1 {
			d.Fatalf(t, "channels=%s: want an integer >= 1", args[0])
		}
		if *v, err = NewValve(n); err != nil {
			d.Fatalf(t, "%v", err)
		}
		return "ok\n"
	}
	if *v == nil {
		d.Fatalf(t, "%s before new", d.Cmd)
	}
	var args []string
	switch d.Cmd {
	case "watermark":
		args = scenarioArgs(t, d, "ch", "ts")
	case "idle", "active":
		args = scenarioArgs(t, d, "ch")
	default:
		d.Fatalf(t, "unknown command %q (want new, watermark, idle or active)", d.Cmd)
	}
	ch, err := strconv.Atoi(args[0])
	if err != nil || ch < 0 || ch >= (*v).Channels() {
		d.Fatalf(t, "ch=%s: want a channel in 0..%d", args[0], (*v).Channels()-1)
	}
	var ts int64
	if d.Cmd == "watermark" {
		if ts, err = strconv.ParseInt(args[1], 10, 64); err != nil {
			d.Fatalf(t, "ts=%s: want a signed 64-bit decimal integer: %v", args[1], err)
		}
	}
	return valveStep(*v, d.Cmd, ChannelIndex(ch), ts)
}

// valveStep hands v one event (cmd is watermark, idle or active) and
// returns what v emitted, in the scenario format.
func valveStep(v *Valve, cmd string, ch ChannelIndex, ts int64) string {
	var out []string
	switch cmd {
	case "watermark":
		if wm, ok := v.InputWatermark(ch, ts); ok {
			out = append(out, fmt.Sprintf("watermark ts=%d", wm))
		}
	case "idle", "active":
		s := Idle
		if cmd == "active" {
			s = Active
		}
		e := v.InputStatus(ch, s)
		if e.HasWatermark {
			out = append(out, fmt.Sprintf("watermark ts=%d", e.Watermark))
		}
		if e.StatusChanged {
			out = append(out, e.Status.String())
		}
	default:
		panic("valveStep: unknown command " + cmd)
	}
	return emitted(out)
}

// emitted renders output lines in the scenario format: "ok" for none.
func emitted(lines []string) string {
	if len(lines) == 0 {
		return "ok\n"
	}
	return strings.Join(lines, "\n") + "\n"
}

// scenarioArgs checks that d has exactly the arguments keys, in that
// order, each with one value, and returns the values.
func scenarioArgs(t *testing.T, d *datadriven.TestData, keys ...string) []string {
	t.Helper()
	want := strings.Join(keys, "= ") + "="
	if len(d.CmdArgs) != len(keys) {
		d.Fatalf(t, "%s: want arguments %s", d.Cmd, want)
	}
	vals := make([]string, len(keys))
	for i, arg := range d.CmdArgs {
		if arg.Key != keys[i] || len(arg.Vals) != 1 {
			d.Fatalf(t, "%s: argument %q: want arguments %s", d.Cmd, arg.String(), want)
		}
		vals[i] = arg.Vals[0]
	}
	return vals
}
