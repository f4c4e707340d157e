package debloat

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"
)

// TestTranscripts drives a Debloater from testdata/*.txt:
//
//	new max=N [min=N] [target=D] [samples=N] [threshold=N]
//	    a fresh debloater; prints its size, or the config error
//	sample bytes=N busy=D buffers=N [times=N]
//	    N samples (default 1); prints "size=S announce" or "size=S" (the
//	    current moving average, when nothing is announced) per sample,
//	    collapsed into "xN" when repeated
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var d *Debloater
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			arg := func(k string) (string, bool) {
				for _, a := range td.CmdArgs {
					if a.Key == k && len(a.Vals) == 1 {
						return a.Vals[0], true
					}
				}
				return "", false
			}
			num := func(k string, def int) int {
				v, ok := arg(k)
				if !ok {
					return def
				}
				n, err := strconv.Atoi(v)
				if err != nil {
					td.Fatalf(t, "%s: %v", k, err)
				}
				return n
			}
			dur := func(k string) time.Duration {
				v, ok := arg(k)
				if !ok {
					return 0
				}
				d, err := time.ParseDuration(v)
				if err != nil {
					td.Fatalf(t, "%s: %v", k, err)
				}
				return d
			}
			switch td.Cmd {
			case "new":
				var err error
				d, err = New(Config{MaxSize: num("max", 0), MinSize: num("min", 0), Target: dur("target"),
					Samples: num("samples", 0), Threshold: num("threshold", 0)})
				if err != nil {
					return err.Error()
				}
				return fmt.Sprintf("size=%d", d.Size())
			case "sample":
				var lines []string
				last, rep := "", 0
				flush := func() {
					if rep > 1 {
						last += fmt.Sprintf(" x%d", rep)
					}
					if rep > 0 {
						lines = append(lines, last)
					}
				}
				for range num("times", 1) {
					size, ok := d.Sample(int64(num("bytes", 0)), dur("busy"), num("buffers", 0))
					line := fmt.Sprintf("size=%d", d.Size())
					if ok {
						line = fmt.Sprintf("size=%d announce", size)
					}
					if line == last {
						rep++
						continue
					}
					flush()
					last, rep = line, 1
				}
				flush()
				return strings.Join(lines, "\n")
			}
			td.Fatalf(t, "unknown command %q", td.Cmd)
			return ""
		})
	})
}

// The moving average converges to the size that drains the buffers in
// flight in the target time, from above and from below, within bounds.
func TestConverges(t *testing.T) {
	for _, tc := range []struct {
		throughput int64 // bytes/s
		buffers    int
		want       int
	}{
		{1 << 20, 64, (1 << 20) / 64},
		{10 << 20, 10, 32 << 10}, // capped at the maximum
		{1000, 10, 256},          // floored at the minimum
	} {
		d, err := New(Config{MaxSize: 32 << 10})
		require.NoError(t, err)
		for range 200 {
			d.Sample(tc.throughput/5, 200*time.Millisecond, tc.buffers)
		}
		require.InDelta(t, tc.want, d.Size(), 1, "%+v", tc)
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{{}, {MaxSize: 100, MinSize: 200}, {MaxSize: 100, Samples: -1}, {MaxSize: 100, Threshold: 101}, {MaxSize: 100, Target: -1}} {
		_, err := New(c)
		require.Error(t, err, "%+v", c)
	}
	c := Config{MaxSize: 100}.WithDefaults()
	require.Equal(t, Config{Target: time.Second, Period: 200 * time.Millisecond, Samples: 20, Threshold: 25, MinSize: 100, MaxSize: 100}, c)
}
