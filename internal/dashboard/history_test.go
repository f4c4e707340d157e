package dashboard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/internal/metrics"
)

func snapshot(at time.Time, in float64, cks ...metrics.Checkpoint) *metrics.Job {
	return &metrics.Job{State: "running", Time: at, Checkpoints: &metrics.Checkpoints{History: cks},
		Vertices: []metrics.Vertex{{ID: "a", Name: "src", NumRecordsOutPerSecond: in * 2},
			{ID: "b", Name: "sink", NumRecordsInPerSecond: in, BackPressuredTimeMsPerSecond: 7, BusyTimeMsPerSecond: 900}}}
}

// The history keeps a point a step, the last window of them, in order,
// and every completed checkpoint once.
func TestHistoryRing(t *testing.T) {
	h := NewHistory(100 * time.Millisecond)
	require.Equal(t, time.Second, h.Step(), "at most HistoryPoints points in the window")
	t0 := time.UnixMilli(1_000_000_000)
	// Samples every 100 ms: one point a second.
	for i := range 30 {
		h.Observe(snapshot(t0.Add(time.Duration(i)*100*time.Millisecond), float64(i)))
	}
	v := h.Since(0)
	require.Equal(t, []int64{t0.UnixMilli(), t0.UnixMilli() + 1000, t0.UnixMilli() + 2000}, v.Times)
	require.Len(t, v.Vertices, 2)
	require.Equal(t, "sink", v.Vertices[1].Name)
	require.Equal(t, []float32{0, 10, 20}, v.Vertices[1].NumRecordsInPerSecond)
	require.Equal(t, []float32{0, 20, 40}, v.Vertices[0].NumRecordsOutPerSecond)
	require.Equal(t, []float32{7, 7, 7}, v.Vertices[1].BackPressuredTimeMsPerSecond)
	require.Equal(t, []float32{900, 900, 900}, v.Vertices[1].BusyTimeMsPerSecond)

	// Since: only the newer points.
	v = h.Since(t0.UnixMilli() + 1000)
	require.Equal(t, []int64{t0.UnixMilli() + 2000}, v.Times)
	require.Equal(t, []float32{20}, v.Vertices[1].NumRecordsInPerSecond)

	// Twenty minutes later the ring holds the last ten, oldest first.
	for i := range 1200 {
		h.Observe(snapshot(t0.Add(3*time.Second+time.Duration(i)*time.Second), float64(i)))
	}
	v = h.Since(0)
	require.Len(t, v.Times, int(HistoryWindow/time.Second))
	newest := t0.Add(3*time.Second + 1199*time.Second).UnixMilli()
	require.Equal(t, newest, v.Times[len(v.Times)-1])
	require.Equal(t, newest-HistoryWindow.Milliseconds()+1000, v.Times[0])
	for i := 1; i < len(v.Times); i++ {
		require.Equal(t, int64(1000), v.Times[i]-v.Times[i-1])
	}
	require.Equal(t, float32(1199), v.Vertices[1].NumRecordsInPerSecond[len(v.Times)-1])
}

func TestHistoryCheckpoints(t *testing.T) {
	h := NewHistory(time.Second)
	t0 := time.UnixMilli(2_000_000_000)
	ck := func(id uint64, status string, at time.Time) metrics.Checkpoint {
		return metrics.Checkpoint{ID: id, Kind: "checkpoint", Status: status, TriggerTime: at, Duration: 40, Size: int64(id) * 100}
	}
	h.Observe(snapshot(t0, 1, ck(2, "in progress", t0), ck(1, "completed", t0.Add(-time.Second))))
	h.Observe(snapshot(t0.Add(time.Second), 1, ck(3, "failed", t0.Add(time.Second)), ck(2, "completed", t0), ck(1, "completed", t0.Add(-time.Second))))
	v := h.Since(0)
	require.Len(t, v.Checkpoints, 2)
	require.Equal(t, CheckpointPoint{ID: 1, Kind: "checkpoint", Time: t0.UnixMilli() - 1000 + 40, Duration: 40, Size: 100}, v.Checkpoints[0])
	require.Equal(t, uint64(2), v.Checkpoints[1].ID)
	require.Empty(t, h.Since(t0.UnixMilli()+40).Checkpoints)
}

// Before the job ran, nothing is charted.
func TestHistoryEmpty(t *testing.T) {
	h := NewHistory(time.Second)
	h.Observe(&metrics.Job{State: "created", Time: time.Now(), Vertices: []metrics.Vertex{{ID: "a"}}})
	v := h.Since(0)
	require.Empty(t, v.Times)
	require.Empty(t, v.Vertices)
	require.NotNil(t, v.Checkpoints)
}
