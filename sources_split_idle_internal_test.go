package weir

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/eventtime"
)

// outputLog records what reaches a subtask's output.
type outputLog []string

func (l *outputLog) EmitWatermark(wm int64) { *l = append(*l, fmt.Sprint("wm ", wm)) }
func (l *outputLog) MarkIdle()              { *l = append(*l, "idle") }
func (l *outputLog) MarkActive()            { *l = append(*l, "active") }

// A periodic emit late enough to find every split's idleness timeout run
// out (a task descheduled for longer than the interval) marks the split
// that went quiet first idle first: split 2 never had a record, so the
// watermark of the other two passes on before the subtask turns idle. In
// split order (the old loop) splits 0 and 1 turned idle while split 2
// held the minimum, then split 2: nothing passed on but idle, and windows
// downstream never fired.
func TestLateEmitIdlesQuietestSplitFirst(t *testing.T) {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	var log outputLog
	o := &splitSourceOp[int]{mux: eventtime.NewMultiplexer(&log)}
	for range 3 {
		g, err := eventtime.NewIdleness(eventtime.NewMonotonousTimestamps(), time.Second, clock)
		require.NoError(t, err)
		o.splits = append(o.splits, &split{gen: g, out: o.mux.Add()})
	}
	o.mux.Combine()
	o.splits[0].gen.OnEvent(14_000, o.splits[0].out)
	o.splits[1].gen.OnEvent(4_000, o.splits[1].out)
	o.emitPeriodic() // splits 0 and 1 emit; split 2's quiet period begins
	now = now.Add(5 * time.Millisecond)
	o.emitPeriodic() // the quiet periods of splits 0 and 1 begin
	require.Empty(t, log, "split 2 holds the watermark")

	now = now.Add(2 * time.Second) // a late emit: every timeout ran out
	o.emitPeriodic()
	require.Equal(t, outputLog{"wm 3999", "idle"}, log)
}
