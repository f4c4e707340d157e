package metrics

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// fakeSource is a Source the test sets.
type fakeSource struct {
	tasks  []TaskSample
	status Status
	stats  *coordinator.Stats
}

func (f *fakeSource) Tasks() []TaskSample { return f.tasks }
func (f *fakeSource) Status() Status      { return f.status }
func (f *fakeSource) Checkpoints() (coordinator.Stats, bool) {
	if f.stats == nil {
		return coordinator.Stats{}, false
	}
	return *f.stats, true
}

var (
	srcKey  = state.TaskKey{Vertex: "src", Subtask: 0}
	sinkKey = state.TaskKey{Vertex: "sink", Subtask: 0}
	t0      = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
)

func testPlan() Plan {
	return Plan{Name: "job", Vertices: []PlanVertex{
		{ID: "src", Name: "numbers -> square", Parallelism: 1, Source: true, Operators: []string{"numbers", "square"}},
		{ID: "sink", Name: "sink", Parallelism: 1, Operators: []string{"sink"}, Inputs: []Input{{ID: "src", Partitioning: "rebalance"}}},
	}}
}

// sample is a task's reading after elapsed seconds, with its counters at
// the given per-second rates.
func sample(k state.TaskKey, attempt int, elapsed float64, recPerSec, busy, idle, bp float64) TaskSample {
	e := time.Duration(elapsed * float64(time.Second))
	ms := func(x float64) time.Duration { return time.Duration(x * elapsed * float64(time.Millisecond)) }
	return TaskSample{Attempt: attempt, Location: "local", LiveMetrics: task.LiveMetrics{
		Key: k, Name: k.Vertex + " (1/1)", State: task.Running, Elapsed: e,
		RecordsIn: int64(recPerSec * elapsed), RecordsOut: int64(2 * recPerSec * elapsed),
		BytesIn: int64(8 * recPerSec * elapsed), BytesOut: int64(16 * recPerSec * elapsed),
		Busy: ms(busy), Idle: ms(idle), BackPressured: ms(bp),
		InputWatermark: 5, OutputWatermark: 6,
		Input:     network.BufferUsage{Queued: 3, InUse: 5, Capacity: 10},
		Output:    network.BufferUsage{Queued: 1, InUse: 10, Capacity: 10},
		Operators: []task.OperatorMetrics{{Name: "window", LateRecordsDropped: 7}},
	}}
}

func TestSamplerRates(t *testing.T) {
	f := &fakeSource{status: Status{State: "running", Running: t0}}
	s := NewSampler(Config{Plan: testPlan(), Source: f, Start: t0})
	require.Equal(t, "created", s.Latest().State)
	require.Len(t, s.Latest().Vertices, 2)

	for i := range 8 {
		f.tasks = []TaskSample{
			sample(srcKey, 0, float64(i), 1000, 100, 0, 900),
			sample(sinkKey, 0, float64(i), 500, 950, 50, 0),
		}
		s.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	j := s.Latest()
	require.Equal(t, "running", j.State)
	require.EqualValues(t, 7000, j.Uptime)
	src, sink := j.Vertices[0].Subtasks[0], j.Vertices[1].Subtasks[0]
	require.InDelta(t, 1000, src.NumRecordsInPerSecond, 1)
	require.InDelta(t, 2000, src.NumRecordsOutPerSecond, 1)
	require.InDelta(t, 8000, src.NumBytesInPerSecond, 1)
	require.InDelta(t, 16000, src.NumBytesOutPerSecond, 1)
	require.InDelta(t, 100, src.BusyTimeMsPerSecond, 0.01)
	require.InDelta(t, 900, src.BackPressuredTimeMsPerSecond, 0.01)
	require.InDelta(t, 950, sink.BusyTimeMsPerSecond, 0.01)
	require.InDelta(t, 50, sink.IdleTimeMsPerSecond, 0.01)
	require.EqualValues(t, 7000, src.NumRecordsIn)
	require.Equal(t, 0.5, src.InPoolUsage)
	require.Equal(t, 1.0, src.OutPoolUsage)
	require.Equal(t, 3, src.InputQueueLength)
	require.Equal(t, 1, src.OutputQueueLength)
	require.EqualValues(t, 7, src.NumLateRecordsDropped)
	require.Equal(t, []Operator{{Name: "window", NumLateRecordsDropped: 7}}, src.Operators)
	require.Equal(t, "running", src.State)
	require.Equal(t, "local", src.Location)

	v := j.Vertices[0]
	require.Equal(t, "high", v.BackPressure)
	require.InDelta(t, 900, v.BackPressuredTimeMsPerSecond, 0.01)
	require.Equal(t, "ok", j.Vertices[1].BackPressure)
	require.Nil(t, j.Checkpoints)
}

// The rates follow the latest samples: a change shows within the window.
func TestSamplerRatesFollowChange(t *testing.T) {
	f := &fakeSource{status: Status{State: "running", Running: t0}}
	s := NewSampler(Config{Plan: testPlan(), Source: f, Start: t0})
	var src TaskSample
	for i := range 10 {
		// 100 records/s for 5 s, then 300/s.
		e := float64(i)
		src = sample(srcKey, 0, e, 100, 0, 1000, 0)
		if i > 5 {
			src.RecordsIn = 500 + int64(300*(e-5))
		}
		f.tasks = []TaskSample{src}
		s.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	require.InDelta(t, 300, s.Latest().Vertices[0].Subtasks[0].NumRecordsInPerSecond, 1)
	require.Equal(t, "unknown", s.Latest().Vertices[1].Subtasks[0].State, "no sample of the sink")
}

// A new attempt's tasks start a new series; a repeated reading (no new
// report) does not shrink the window; a finished task has no rates.
func TestSamplerSeries(t *testing.T) {
	f := &fakeSource{status: Status{State: "running", Running: t0}}
	s := NewSampler(Config{Plan: testPlan(), Source: f, Start: t0})
	for i := range 3 {
		f.tasks = []TaskSample{sample(srcKey, 0, float64(i), 100, 0, 1000, 0)}
		s.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	// The same reading again.
	s.Sample(t0.Add(3 * time.Second))
	require.InDelta(t, 100, s.Latest().Vertices[0].Subtasks[0].NumRecordsInPerSecond, 1)
	require.Len(t, s.series[seriesKey{0, srcKey}].samples, 3)

	// Attempt 1 starts from zero.
	f.status = Status{State: "running", Attempt: 1, Restarts: 1, Running: t0.Add(4 * time.Second),
		Exception: &Exception{Time: t0, Message: "boom"}}
	f.tasks = []TaskSample{sample(srcKey, 1, 0.5, 100, 0, 1000, 0)}
	s.Sample(t0.Add(4 * time.Second))
	j := s.Latest()
	require.Zero(t, j.Vertices[0].Subtasks[0].NumRecordsInPerSecond, "one sample of the new attempt")
	require.EqualValues(t, 50, j.Vertices[0].Subtasks[0].NumRecordsIn)
	require.Equal(t, 1, j.NumRestarts)
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, "boom", j.LatestException.Message)
	require.NotContains(t, s.series, seriesKey{0, srcKey}, "the old attempt's series is dropped")

	f.tasks = []TaskSample{sample(srcKey, 1, 1.5, 100, 0, 1000, 0)}
	f.tasks[0].State = task.Finished
	s.Sample(t0.Add(5 * time.Second))
	require.Zero(t, s.Latest().Vertices[0].Subtasks[0].NumRecordsInPerSecond)
	require.Equal(t, "finished", s.Latest().Vertices[0].Subtasks[0].State)
}

func TestSamplerCheckpoints(t *testing.T) {
	ack := func(align, delay time.Duration) coordinator.TaskStats {
		return coordinator.TaskStats{TaskCheckpointMetrics: coordinator.TaskCheckpointMetrics{AlignmentDuration: align, StartDelay: delay}}
	}
	st := coordinator.Stats{InProgress: 1, Completed: 2, Failed: 1, History: []coordinator.CheckpointStats{
		{ID: 4, Status: coordinator.InProgress, TriggerTime: t0.Add(3 * time.Second), Duration: 10 * time.Millisecond, Tasks: 2, Acknowledged: 1,
			PerTask: map[state.TaskKey]coordinator.TaskStats{srcKey: ack(0, 2*time.Millisecond)}},
		{ID: 3, Kind: barrier.Savepoint, Status: coordinator.Completed, TriggerTime: t0.Add(2 * time.Second), Duration: 300 * time.Millisecond,
			StateSize: 30, Tasks: 2, Acknowledged: 2, SavepointPath: "/sp",
			PerTask: map[state.TaskKey]coordinator.TaskStats{srcKey: ack(0, time.Millisecond), sinkKey: ack(40*time.Millisecond, 3*time.Millisecond)}},
		{ID: 2, Status: coordinator.Failed, TriggerTime: t0.Add(time.Second), Duration: time.Second, Tasks: 2, Failure: errors.New("expired")},
		{ID: 1, Status: coordinator.Completed, TriggerTime: t0, Duration: 100 * time.Millisecond, StateSize: 10, Tasks: 2, Acknowledged: 2},
	}}
	latest := st.History[1]
	st.LatestCompleted = &latest
	f := &fakeSource{status: Status{State: "running", Running: t0, Restored: t0.Add(time.Minute)}, stats: &st,
		tasks: []TaskSample{sample(srcKey, 0, 1, 1, 1, 1, 1), sample(sinkKey, 0, 1, 1, 1, 1, 1)}}
	s := NewSampler(Config{Plan: testPlan(), Source: f, Start: t0})
	s.Sample(t0.Add(4 * time.Second))
	c := s.Latest().Checkpoints
	require.NotNil(t, c)
	require.Equal(t, 2, c.NumberOfCompletedCheckpoints)
	require.Equal(t, 1, c.NumberOfFailedCheckpoints)
	require.Equal(t, 1, c.NumberOfInProgressCheckpoints)
	require.EqualValues(t, 300, c.LastCheckpointDuration)
	require.EqualValues(t, 30, c.LastCheckpointSize)
	require.Equal(t, t0.Add(time.Minute).UnixMilli(), c.LastCheckpointRestoreTimestamp)
	require.Equal(t, Summary{Count: 2, Min: 100, Avg: 200, Max: 300}, c.Summary)
	require.Len(t, c.History, 4)
	require.Equal(t, Checkpoint{ID: 3, Kind: "savepoint", Status: "completed", Acknowledged: 2, Total: 2,
		TriggerTime: t0.Add(2 * time.Second), Duration: 300, Size: 30, AlignmentTime: 40, SavepointPath: "/sp"}, c.History[1])
	require.Equal(t, "expired", c.History[2].Failure)
	require.Equal(t, "checkpoint", c.History[0].Kind)
	// Per task: the newest acknowledgement.
	j := s.Latest()
	require.EqualValues(t, 2*time.Millisecond, j.Vertices[0].Subtasks[0].CheckpointStartDelayNanos)
	require.EqualValues(t, 40*time.Millisecond, j.Vertices[1].Subtasks[0].CheckpointAlignmentTime)

	// Without a completed checkpoint or restore.
	f.stats, f.status.Restored = &coordinator.Stats{}, time.Time{}
	s.Sample(t0.Add(5 * time.Second))
	c = s.Latest().Checkpoints
	require.EqualValues(t, -1, c.LastCheckpointDuration)
	require.EqualValues(t, -1, c.LastCheckpointSize)
	require.EqualValues(t, -1, c.LastCheckpointRestoreTimestamp)
	require.Zero(t, c.Summary)
}

func TestBackPressureLevel(t *testing.T) {
	require.Equal(t, "ok", BackPressureLevel(0))
	require.Equal(t, "ok", BackPressureLevel(100))
	require.Equal(t, "low", BackPressureLevel(101))
	require.Equal(t, "low", BackPressureLevel(500))
	require.Equal(t, "high", BackPressureLevel(501))
}

func TestCollector(t *testing.T) {
	st := coordinator.Stats{Completed: 3}
	f := &fakeSource{status: Status{State: "running", Running: t0, Restarts: 2}, stats: &st}
	s := NewSampler(Config{Plan: testPlan(), Source: f, Start: t0})
	for i := range 3 {
		f.tasks = []TaskSample{sample(srcKey, 0, float64(i), 100, 200, 300, 500)}
		// Two window operators of the same name: distinct label sets.
		f.tasks[0].Operators = append(f.tasks[0].Operators, task.OperatorMetrics{Name: "window", LateRecordsDropped: 1})
		s.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(NewCollector(s.Latest)))
	want := `
# HELP weir_job_numRestarts Restarts of the job after failures.
# TYPE weir_job_numRestarts counter
weir_job_numRestarts{job="job"} 2
# HELP weir_job_numberOfCompletedCheckpoints Completed checkpoints.
# TYPE weir_job_numberOfCompletedCheckpoints counter
weir_job_numberOfCompletedCheckpoints{job="job"} 3
# HELP weir_task_backPressuredTimeMsPerSecond Time waiting for output buffers, in ms per second.
# TYPE weir_task_backPressuredTimeMsPerSecond gauge
weir_task_backPressuredTimeMsPerSecond{job="job",subtask_index="0",task="numbers -> square",task_id="src"} 500
# HELP weir_task_numRecordsIn Records the subtask received.
# TYPE weir_task_numRecordsIn counter
weir_task_numRecordsIn{job="job",subtask_index="0",task="numbers -> square",task_id="src"} 200
# HELP weir_operator_numLateRecordsDropped Late records the window operator dropped.
# TYPE weir_operator_numLateRecordsDropped counter
weir_operator_numLateRecordsDropped{job="job",operator="window",subtask_index="0",task="numbers -> square",task_id="src"} 7
weir_operator_numLateRecordsDropped{job="job",operator="window #2",subtask_index="0",task="numbers -> square",task_id="src"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "weir_job_numRestarts",
		"weir_job_numberOfCompletedCheckpoints", "weir_task_backPressuredTimeMsPerSecond", "weir_task_numRecordsIn",
		"weir_operator_numLateRecordsDropped"))
	// The sink has no metrics yet: no series for it.
	n, err := testutil.GatherAndCount(reg, "weir_task_numRecordsIn")
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func TestProgressLine(t *testing.T) {
	f := &fakeSource{status: Status{State: "running", Running: t0, Restarts: 1}, stats: &coordinator.Stats{Completed: 1, Failed: 2,
		History: []coordinator.CheckpointStats{{ID: 7, Status: coordinator.Completed, TriggerTime: t0.Add(8 * time.Second),
			Duration: 120 * time.Millisecond, StateSize: 3 << 20}}}}
	s := NewSampler(Config{Plan: testPlan(), Source: f, Start: t0})
	for i := range 11 {
		f.tasks = []TaskSample{sample(srcKey, 0, float64(i), 100, 100, 0, 900), sample(sinkKey, 0, float64(i), 20000, 1000, 0, 0)}
		s.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	require.Equal(t, "job: up 10s, sources 200 records/s, sinks 20.0k records/s, back-pressured: numbers -> square (90%), "+
		"last checkpoint 7 2s ago in 120ms (3.0 MiB), 2 failed, 1 restarts", ProgressLine(s.Latest()))
}

func TestCloneIsDeep(t *testing.T) {
	f := &fakeSource{status: Status{State: "running", Exception: &Exception{Message: "x"}}, stats: &coordinator.Stats{
		History: []coordinator.CheckpointStats{{ID: 1}}}, tasks: []TaskSample{sample(srcKey, 0, 1, 1, 1, 1, 1)}}
	s := NewSampler(Config{Plan: testPlan(), Source: f, Start: t0})
	s.Sample(t0)
	c := s.Latest().Clone()
	c.Vertices[0].Subtasks[0].NumRecordsIn = -1
	c.Vertices[0].Subtasks[0].Operators[0].Name = "changed"
	c.Vertices[0].Operators[0] = "changed"
	c.Checkpoints.History[0].ID = 99
	c.LatestException.Message = "changed"
	j := s.Latest()
	require.NotEqual(t, int64(-1), j.Vertices[0].Subtasks[0].NumRecordsIn)
	require.Equal(t, "window", j.Vertices[0].Subtasks[0].Operators[0].Name)
	require.Equal(t, "numbers", j.Vertices[0].Operators[0])
	require.EqualValues(t, 1, j.Checkpoints.History[0].ID)
	require.Equal(t, "x", j.LatestException.Message)
}
