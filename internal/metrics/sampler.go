package metrics

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// DefaultInterval is how often a job samples its tasks by default.
const DefaultInterval = time.Second

// rateSamples is how many samples of a task the rates span: the rates are
// averages over the last rateSamples-1 intervals.
const rateSamples = 5

// TaskSample is one reading of a task's metrics.
type TaskSample struct {
	task.LiveMetrics
	// Attempt is the attempt the task belongs to.
	Attempt int
	// Location is where it runs: "local" or a worker's ID.
	Location string
}

// Status is the job's state as the job master sees it.
type Status struct {
	State    string
	Attempt  int
	Restarts int
	// Running is when the current attempt was deployed (zero while the
	// job is not running).
	Running time.Time
	// Exception is the latest failure (nil: none).
	Exception *Exception
	// Restored is when the job last restored from a checkpoint (zero:
	// never); Restores counts the attempts restored from one.
	Restored time.Time
	Restores int
}

// Source is what the sampler reads: the job master implements it. Calls
// come from the sampler's goroutine; each must be quick and must not wait
// for the tasks.
type Source interface {
	// Tasks returns the latest metrics of the running attempt's tasks.
	Tasks() []TaskSample
	// Status returns the job's state.
	Status() Status
	// Checkpoints returns the checkpoint statistics (false: the job
	// does not checkpoint).
	Checkpoints() (coordinator.Stats, bool)
}

// Plan is the shape of a job's graph, for its snapshots.
type Plan struct {
	Name     string
	Vertices []PlanVertex
}

// PlanVertex is one vertex of a Plan.
type PlanVertex struct {
	ID, Name    string
	Parallelism int
	Source      bool
	Operators   []string
	Inputs      []Input
}

// PlanOf describes g.
func PlanOf(name string, g *graph.JobGraph) Plan {
	p := Plan{Name: name}
	for _, v := range g.Vertices {
		pv := PlanVertex{ID: v.ID, Name: v.Name, Parallelism: v.Parallelism, Source: v.IsSource()}
		for _, n := range v.Nodes {
			pv.Operators = append(pv.Operators, n.Name)
		}
		for _, in := range v.Inputs {
			pv.Inputs = append(pv.Inputs, Input{ID: g.VertexOf(in.From).ID, Partitioning: in.Partitioning.String()})
		}
		p.Vertices = append(p.Vertices, pv)
	}
	return p
}

// Sampler samples a job's metrics periodically and publishes each
// snapshot (Latest): readers never reach the tasks. Sample does the work
// and is deterministic given its source and time; Run drives it.
type Sampler struct {
	plan     Plan
	src      Source
	interval time.Duration
	start    time.Time
	onSample func(*Job) // nil: none

	// Owned by the goroutine that calls Sample.
	series map[seriesKey]*series

	latest atomic.Pointer[Job]
}

type seriesKey struct {
	attempt int
	task    state.TaskKey
}

// series is the recent samples of one task of one attempt, oldest first.
type series struct {
	samples []TaskSample
	seen    bool // sampled in the latest round
}

// Config configures a Sampler.
type Config struct {
	Plan   Plan
	Source Source
	// Interval is the sampling interval (0: DefaultInterval).
	Interval time.Duration
	// Start is when the job started.
	Start time.Time
	// OnSample, if set, is called with every snapshot, in the sampler's
	// goroutine (progress logging).
	OnSample func(*Job)
}

// NewSampler returns a sampler; it starts nothing. Latest returns an
// empty snapshot of the plan until the first Sample.
func NewSampler(cfg Config) *Sampler {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	s := &Sampler{plan: cfg.Plan, src: cfg.Source, interval: cfg.Interval, start: cfg.Start, onSample: cfg.OnSample,
		series: map[seriesKey]*series{}}
	s.latest.Store(s.snapshot(cfg.Start, Status{State: "created"}, nil, coordinator.Stats{}, false))
	return s
}

// Latest returns the latest snapshot. Safe from any goroutine; it never
// blocks. The snapshot must not be modified.
func (s *Sampler) Latest() *Job { return s.latest.Load() }

// Run samples every interval until ctx ends, then samples a last time.
func (s *Sampler) Run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	s.Sample(time.Now())
	for {
		select {
		case now := <-t.C:
			s.Sample(now)
		case <-ctx.Done():
			s.Sample(time.Now())
			return
		}
	}
}

// Sample reads the source at now and publishes a snapshot. Only one
// goroutine may call it.
func (s *Sampler) Sample(now time.Time) {
	st := s.src.Status()
	tasks := s.src.Tasks()
	cs, ckpt := s.src.Checkpoints()
	for _, ser := range s.series {
		ser.seen = false
	}
	for _, ts := range tasks {
		k := seriesKey{ts.Attempt, ts.Key}
		ser := s.series[k]
		if ser == nil {
			ser = &series{}
			s.series[k] = ser
		}
		ser.seen = true
		ser.add(ts)
	}
	for k, ser := range s.series {
		if !ser.seen {
			delete(s.series, k) // an earlier attempt's
		}
	}
	j := s.snapshot(now, st, tasks, cs, ckpt)
	s.latest.Store(j)
	if s.onSample != nil {
		s.onSample(j)
	}
}

func (ser *series) add(ts TaskSample) {
	if n := len(ser.samples); n > 0 {
		last := &ser.samples[n-1]
		if ts.Elapsed == last.Elapsed {
			// Nothing new (a finished task, or no report since):
			// only gauges may have changed.
			*last = ts
			return
		}
		if ts.Elapsed < last.Elapsed {
			ser.samples = ser.samples[:0] // restarted
		}
	}
	if len(ser.samples) == rateSamples {
		copy(ser.samples, ser.samples[1:])
		ser.samples = ser.samples[:rateSamples-1]
	}
	ser.samples = append(ser.samples, ts)
}

// rates are a task's per-second rates over its series.
type rates struct {
	recordsIn, recordsOut, bytesIn, bytesOut float64
	busy, idle, backPressured                float64 // ms per second
}

func (ser *series) rates() rates {
	n := len(ser.samples)
	if n < 2 {
		return rates{}
	}
	a, b := &ser.samples[0], &ser.samples[n-1]
	if b.State != task.Running {
		return rates{}
	}
	dt := (b.Elapsed - a.Elapsed).Seconds()
	if dt <= 0 {
		return rates{}
	}
	per := func(x, y int64) float64 { return max(0, float64(y-x)/dt) }
	ms := func(x, y time.Duration) float64 { return min(1000, max(0, float64(y-x)/float64(time.Millisecond)/dt)) }
	return rates{
		recordsIn: per(a.RecordsIn, b.RecordsIn), recordsOut: per(a.RecordsOut, b.RecordsOut),
		bytesIn: per(a.BytesIn, b.BytesIn), bytesOut: per(a.BytesOut, b.BytesOut),
		busy: ms(a.Busy, b.Busy), idle: ms(a.Idle, b.Idle), backPressured: ms(a.BackPressured, b.BackPressured),
	}
}

// snapshot builds the published Job.
func (s *Sampler) snapshot(now time.Time, st Status, tasks []TaskSample, cs coordinator.Stats, ckpt bool) *Job {
	j := &Job{Name: s.plan.Name, State: st.State, Time: now, StartTime: s.start, NumRestarts: st.Restarts,
		Attempt: st.Attempt, LatestException: st.Exception}
	if !st.Running.IsZero() {
		j.Uptime = max(0, now.Sub(st.Running).Milliseconds())
	}
	var perTask map[state.TaskKey]coordinator.TaskStats
	if ckpt {
		j.Checkpoints = checkpoints(cs, st.Restored)
		perTask = latestAcks(cs)
	}
	byKey := make(map[state.TaskKey]*TaskSample, len(tasks))
	for i := range tasks {
		if t := &tasks[i]; t.Attempt == st.Attempt || byKey[t.Key] == nil {
			byKey[t.Key] = t
		}
	}
	for _, pv := range s.plan.Vertices {
		v := Vertex{ID: pv.ID, Name: pv.Name, Parallelism: pv.Parallelism, Operators: pv.Operators, Inputs: pv.Inputs,
			Subtasks: make([]Task, pv.Parallelism)}
		if v.Inputs == nil {
			v.Inputs = []Input{}
		}
		for i := range v.Subtasks {
			k := state.TaskKey{Vertex: pv.ID, Subtask: i}
			t := &v.Subtasks[i]
			t.Subtask, t.State = i, "unknown"
			t.CurrentInputWatermark, t.CurrentOutputWatermark = minWatermark, minWatermark
			if ts := byKey[k]; ts != nil {
				var r rates
				if ser := s.series[seriesKey{ts.Attempt, k}]; ser != nil {
					r = ser.rates()
				}
				fillTask(t, ts, r)
			}
			if a, ok := perTask[k]; ok {
				t.CheckpointAlignmentTime = int64(a.AlignmentDuration)
				t.CheckpointStartDelayNanos = int64(a.StartDelay)
			}
			v.NumRecordsIn += t.NumRecordsIn
			v.NumRecordsOut += t.NumRecordsOut
			v.NumRecordsInPerSecond += t.NumRecordsInPerSecond
			v.NumRecordsOutPerSecond += t.NumRecordsOutPerSecond
			v.BusyTimeMsPerSecond = max(v.BusyTimeMsPerSecond, t.BusyTimeMsPerSecond)
			v.BackPressuredTimeMsPerSecond = max(v.BackPressuredTimeMsPerSecond, t.BackPressuredTimeMsPerSecond)
		}
		v.BackPressure = BackPressureLevel(v.BackPressuredTimeMsPerSecond)
		j.Vertices = append(j.Vertices, v)
	}
	return j
}

const minWatermark = -1 << 63

// BackPressureLevel is Flink's level for a back-pressured time in ms per
// second: "ok" up to 10 %, "low" up to 50 %, "high" above.
func BackPressureLevel(msPerSecond float64) string {
	switch {
	case msPerSecond > 500:
		return "high"
	case msPerSecond > 100:
		return "low"
	}
	return "ok"
}

func fillTask(t *Task, ts *TaskSample, r rates) {
	t.Name, t.State, t.Location = ts.Name, ts.State.String(), ts.Location
	t.NumRecordsIn, t.NumRecordsOut, t.NumBytesIn, t.NumBytesOut = ts.RecordsIn, ts.RecordsOut, ts.BytesIn, ts.BytesOut
	t.NumRecordsInPerSecond, t.NumRecordsOutPerSecond = r.recordsIn, r.recordsOut
	t.NumBytesInPerSecond, t.NumBytesOutPerSecond = r.bytesIn, r.bytesOut
	t.BusyTimeMsPerSecond, t.IdleTimeMsPerSecond, t.BackPressuredTimeMsPerSecond = r.busy, r.idle, r.backPressured
	t.AccumulatedBusyTime, t.AccumulatedIdleTime = ts.Busy.Milliseconds(), ts.Idle.Milliseconds()
	t.AccumulatedBackPressuredTime = ts.BackPressured.Milliseconds()
	t.InPoolUsage, t.OutPoolUsage = ts.Input.Ratio(), ts.Output.Ratio()
	t.InputQueueLength, t.OutputQueueLength = ts.Input.Queued, ts.Output.Queued
	t.CurrentInputWatermark, t.CurrentOutputWatermark = ts.InputWatermark, ts.OutputWatermark
	for _, op := range ts.Operators {
		t.NumLateRecordsDropped += op.LateRecordsDropped
		t.Operators = append(t.Operators, Operator{Name: op.Name, NumLateRecordsDropped: op.LateRecordsDropped})
	}
}

// latestAcks returns, per task, its acknowledgement of the newest
// checkpoint it acknowledged.
func latestAcks(cs coordinator.Stats) map[state.TaskKey]coordinator.TaskStats {
	m := map[state.TaskKey]coordinator.TaskStats{}
	for _, c := range cs.History { // newest first
		for k, a := range c.PerTask {
			if _, ok := m[k]; !ok {
				m[k] = a
			}
		}
	}
	return m
}

// histogramOf converts the coordinator's histogram of checkpoint
// durations: bounds in ms, counts cumulative.
func histogramOf(h *coordinator.DurationHistogram) Histogram {
	out := Histogram{Bounds: make([]float64, len(coordinator.DurationBuckets)), Counts: make([]uint64, len(coordinator.DurationBuckets)),
		Count: h.Count, Sum: float64(h.Sum) / float64(time.Millisecond)}
	var n uint64
	for i, b := range coordinator.DurationBuckets {
		n += h.Counts[i]
		out.Bounds[i], out.Counts[i] = float64(b)/float64(time.Millisecond), n
	}
	return out
}

func checkpoints(cs coordinator.Stats, restored time.Time) *Checkpoints {
	c := &Checkpoints{
		NumberOfCompletedCheckpoints:   cs.Completed,
		NumberOfFailedCheckpoints:      cs.Failed,
		NumberOfAbortedCheckpoints:     cs.Aborted,
		NumberOfInProgressCheckpoints:  cs.InProgress,
		LastCheckpointDuration:         -1,
		LastCheckpointSize:             -1,
		LastCheckpointRestoreTimestamp: -1,
		History:                        make([]Checkpoint, 0, len(cs.History)),
	}
	if l := cs.LatestCompleted; l != nil {
		c.LastCheckpointDuration, c.LastCheckpointSize = l.Duration.Milliseconds(), l.StateSize
	}
	if !restored.IsZero() {
		c.LastCheckpointRestoreTimestamp = restored.UnixMilli()
	}
	var sum int64
	for _, h := range cs.History {
		cp := Checkpoint{ID: uint64(h.ID), Kind: kindName(h.Kind), Status: h.Status.String(), Acknowledged: h.Acknowledged,
			Total: h.Tasks, TriggerTime: h.TriggerTime, Duration: h.Duration.Milliseconds(), Size: h.StateSize,
			SavepointPath: h.SavepointPath}
		for _, a := range h.PerTask {
			cp.AlignmentTime = max(cp.AlignmentTime, a.AlignmentDuration.Milliseconds())
		}
		if h.Failure != nil {
			cp.Failure = h.Failure.Error()
		}
		c.History = append(c.History, cp)
		if h.Status == coordinator.Completed {
			d := cp.Duration
			if c.Summary.Count == 0 {
				c.Summary.Min, c.Summary.Max = d, d
			}
			c.Summary.Count++
			c.Summary.Min, c.Summary.Max = min(c.Summary.Min, d), max(c.Summary.Max, d)
			sum += d
		}
	}
	if c.Summary.Count > 0 {
		c.Summary.Avg = sum / int64(c.Summary.Count)
	}
	c.Durations = histogramOf(&cs.Durations)
	return c
}

func kindName(k barrier.Kind) string {
	if k == barrier.Savepoint {
		return "savepoint"
	}
	return "checkpoint"
}
