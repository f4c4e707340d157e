package join

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/weirstream/weir/eventtime"
)

// watermarksScenario drives op=watermarks: the task's combination of its
// inputs' watermarks, the eventtime.CombinedValve every task runs.
type watermarksScenario struct {
	v        *eventtime.CombinedValve
	channels []int
}

func newWatermarksScenario(t *testing.T, d *datadriven.TestData, a *args) (scenario, string) {
	t.Helper()
	n := a.int64("inputs")
	if n < 1 {
		a.fatalf("inputs=%d: want at least 1", n)
	}
	parts := strings.Split(a.str("channels"), ",")
	if int64(len(parts)) != n {
		a.fatalf("channels= has %d counts for %d inputs", len(parts), n)
	}
	chans := make([]int, n)
	for i, p := range parts {
		c := a.number("channels", p)
		if c < 1 || c > 1<<20 {
			a.fatalf("input %d: %d channels, want 1..%d", i+1, c, 1<<20)
		}
		chans[i] = int(c)
	}
	v, err := eventtime.NewCombinedValve(chans)
	if err != nil {
		a.fatalf("%v", err)
	}
	return &watermarksScenario{v: v, channels: chans}, "ok\n"
}

func (s *watermarksScenario) run(t *testing.T, d *datadriven.TestData, a *args) string {
	t.Helper()
	switch d.Cmd {
	case "watermark":
		in, ch := s.channel(a)
		return emission(s.v.ProcessWatermark(in, ch, a.int64("ts")))
	case "status":
		in, ch := s.channel(a)
		st := eventtime.Active
		if a.word("idle", "active") == "idle" {
			st = eventtime.Idle
		}
		return emission(s.v.ProcessStatus(in, ch, st))
	case "record":
		in, _ := s.channel(a)
		return fmt.Sprintf("record input=%d v=%s\n", in+1, a.name("v"))
	}
	a.fatalf("unknown command for op=watermarks (want watermark, status or record)")
	return ""
}

// channel reads input= (1..N) and channel= (0..Ci-1): the input's index
// from 0 and the channel.
func (s *watermarksScenario) channel(a *args) (int, eventtime.ChannelIndex) {
	a.t.Helper()
	in := a.int64("input")
	if in < 1 || in > int64(len(s.channels)) {
		a.fatalf("input=%d outside 1..%d", in, len(s.channels))
	}
	ch := a.int64("channel")
	if ch < 0 || ch >= int64(s.channels[in-1]) {
		a.fatalf("channel=%d outside 0..%d of input %d", ch, s.channels[in-1]-1, in)
	}
	return int(in - 1), eventtime.ChannelIndex(ch)
}

// emission renders what the task forwarded.
func emission(e eventtime.CombinedEmission) string {
	var lines []string
	if e.Forward {
		for _, wm := range e.Watermarks[:e.Count] {
			lines = append(lines, fmt.Sprintf("watermark ts=%d", wm))
		}
	}
	if e.StatusChanged {
		lines = append(lines, "status "+e.Status.String())
	}
	return output(lines)
}
