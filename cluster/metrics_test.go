package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/task"
)

// LiveTaskMetrics carries every field of task.LiveMetrics, in every task
// state.
func TestLiveTaskMetricsRoundTrip(t *testing.T) {
	for _, st := range []task.State{task.Created, task.Running, task.Finished, task.Failed, task.Canceled} {
		m := task.LiveMetrics{Key: sampleTask, Name: "window (3/4)", State: st, Elapsed: time.Second,
			RecordsIn: 1, RecordsOut: 2, BytesIn: 3, BytesOut: 4, Busy: 5, Idle: 6, BackPressured: 7,
			InputWatermark: 8, OutputWatermark: 9,
			Input: network.BufferUsage{Queued: 10, InUse: 11, Capacity: 12}, Output: network.BufferUsage{Queued: 13, InUse: 14, Capacity: 15},
			Operators: []task.OperatorMetrics{{Name: "window", LateRecordsDropped: 16}}}
		require.Equal(t, m, LiveTaskMetricsFrom(m).ToTask(), st.String())
	}
}
