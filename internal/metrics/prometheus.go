package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric name: weir_job_numRestarts,
// weir_task_numRecordsIn, weir_operator_numLateRecordsDropped.
const Namespace = "weir"

// Label names.
var (
	jobLabels      = []string{"job"}
	taskLabels     = []string{"job", "task_id", "task", "subtask_index"}
	operatorLabels = []string{"job", "task_id", "task", "subtask_index", "operator"}
)

type jobMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(*Job) (float64, bool)
}

type taskMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(*Task) float64
}

// Collector is a prometheus.Collector of one job's metrics, with Flink's
// names, read from the job's latest snapshot: collecting never reaches
// the job's tasks. Register it in a prometheus.Registry.
type Collector struct {
	latest func() *Job
	job    []jobMetric
	task   []taskMetric
	late   *prometheus.Desc
	// durations is the histogram of checkpoint durations.
	durations *prometheus.Desc
}

// NewCollector returns a collector of the snapshots latest returns.
func NewCollector(latest func() *Job) *Collector {
	c := &Collector{latest: latest}
	ckpt := func(f func(*Checkpoints) float64) func(*Job) (float64, bool) {
		return func(j *Job) (float64, bool) {
			if j.Checkpoints == nil {
				return 0, false
			}
			return f(j.Checkpoints), true
		}
	}
	jm := func(name, help string, typ prometheus.ValueType, v func(*Job) (float64, bool)) {
		c.job = append(c.job, jobMetric{prometheus.NewDesc(Namespace+"_job_"+name, help, jobLabels, nil), typ, v})
	}
	always := func(f func(*Job) float64) func(*Job) (float64, bool) {
		return func(j *Job) (float64, bool) { return f(j), true }
	}
	jm("uptime", "How long the job has been running without interruption, in ms.", prometheus.GaugeValue,
		always(func(j *Job) float64 { return float64(j.Uptime) }))
	jm("numRestarts", "Restarts of the job after failures.", prometheus.CounterValue,
		always(func(j *Job) float64 { return float64(j.NumRestarts) }))
	jm("numberOfCompletedCheckpoints", "Completed checkpoints.", prometheus.CounterValue,
		ckpt(func(c *Checkpoints) float64 { return float64(c.NumberOfCompletedCheckpoints) }))
	jm("numberOfFailedCheckpoints", "Failed checkpoints.", prometheus.CounterValue,
		ckpt(func(c *Checkpoints) float64 { return float64(c.NumberOfFailedCheckpoints) }))
	jm("numberOfAbortedCheckpoints", "Checkpoints aborted by the job's end (not failures).", prometheus.CounterValue,
		ckpt(func(c *Checkpoints) float64 { return float64(c.NumberOfAbortedCheckpoints) }))
	jm("numberOfInProgressCheckpoints", "Checkpoints in progress.", prometheus.GaugeValue,
		ckpt(func(c *Checkpoints) float64 { return float64(c.NumberOfInProgressCheckpoints) }))
	jm("lastCheckpointDuration", "Duration of the latest completed checkpoint, in ms (-1: none).", prometheus.GaugeValue,
		ckpt(func(c *Checkpoints) float64 { return float64(c.LastCheckpointDuration) }))
	jm("lastCheckpointSize", "State size of the latest completed checkpoint, in bytes (-1: none).", prometheus.GaugeValue,
		ckpt(func(c *Checkpoints) float64 { return float64(c.LastCheckpointSize) }))
	jm("lastCheckpointRestoreTimestamp", "When the job last restored from a checkpoint, in unix ms (-1: never).", prometheus.GaugeValue,
		ckpt(func(c *Checkpoints) float64 { return float64(c.LastCheckpointRestoreTimestamp) }))

	tm := func(name, help string, typ prometheus.ValueType, v func(*Task) float64) {
		c.task = append(c.task, taskMetric{prometheus.NewDesc(Namespace+"_task_"+name, help, taskLabels, nil), typ, v})
	}
	counter, gauge := prometheus.CounterValue, prometheus.GaugeValue
	tm("numRecordsIn", "Records the subtask received.", counter, func(t *Task) float64 { return float64(t.NumRecordsIn) })
	tm("numRecordsOut", "Records the subtask sent.", counter, func(t *Task) float64 { return float64(t.NumRecordsOut) })
	tm("numBytesIn", "Bytes the subtask received.", counter, func(t *Task) float64 { return float64(t.NumBytesIn) })
	tm("numBytesOut", "Bytes the subtask sent.", counter, func(t *Task) float64 { return float64(t.NumBytesOut) })
	tm("numRecordsInPerSecond", "Records received per second.", gauge, func(t *Task) float64 { return t.NumRecordsInPerSecond })
	tm("numRecordsOutPerSecond", "Records sent per second.", gauge, func(t *Task) float64 { return t.NumRecordsOutPerSecond })
	tm("numBytesInPerSecond", "Bytes received per second.", gauge, func(t *Task) float64 { return t.NumBytesInPerSecond })
	tm("numBytesOutPerSecond", "Bytes sent per second.", gauge, func(t *Task) float64 { return t.NumBytesOutPerSecond })
	tm("busyTimeMsPerSecond", "Time busy, in ms per second.", gauge, func(t *Task) float64 { return t.BusyTimeMsPerSecond })
	tm("idleTimeMsPerSecond", "Time waiting for input, in ms per second.", gauge, func(t *Task) float64 { return t.IdleTimeMsPerSecond })
	tm("backPressuredTimeMsPerSecond", "Time waiting for output buffers, in ms per second.", gauge,
		func(t *Task) float64 { return t.BackPressuredTimeMsPerSecond })
	tm("inPoolUsage", "Fraction of the input buffers in use.", gauge, func(t *Task) float64 { return t.InPoolUsage })
	tm("outPoolUsage", "Fraction of the output buffers in use.", gauge, func(t *Task) float64 { return t.OutPoolUsage })
	tm("inputQueueLength", "Input buffers queued.", gauge, func(t *Task) float64 { return float64(t.InputQueueLength) })
	tm("outputQueueLength", "Output buffers queued.", gauge, func(t *Task) float64 { return float64(t.OutputQueueLength) })
	tm("checkpointAlignmentTime", "Alignment time of the latest checkpoint the subtask acknowledged, in ns.", gauge,
		func(t *Task) float64 { return float64(t.CheckpointAlignmentTime) })
	tm("checkpointStartDelayNanos", "Delay from the trigger of the latest checkpoint the subtask acknowledged to its start, in ns.", gauge,
		func(t *Task) float64 { return float64(t.CheckpointStartDelayNanos) })
	tm("currentInputWatermark", "The subtask's input watermark, in unix ms.", gauge,
		func(t *Task) float64 { return float64(t.CurrentInputWatermark) })
	tm("currentOutputWatermark", "The subtask's output watermark, in unix ms.", gauge,
		func(t *Task) float64 { return float64(t.CurrentOutputWatermark) })
	tm("numLateRecordsDropped", "Late records the subtask's window operators dropped.", counter,
		func(t *Task) float64 { return float64(t.NumLateRecordsDropped) })
	c.late = prometheus.NewDesc(Namespace+"_operator_numLateRecordsDropped", "Late records the window operator dropped.", operatorLabels, nil)
	c.durations = prometheus.NewDesc(Namespace+"_job_checkpoint_duration_seconds",
		"Durations of the completed checkpoints (not savepoints), from trigger to completion, in seconds.", jobLabels, nil)
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.job {
		ch <- m.desc
	}
	for _, m := range c.task {
		ch <- m.desc
	}
	ch <- c.late
	ch <- c.durations
}

// Collect implements prometheus.Collector. Subtasks without metrics yet
// (or of a lost worker) are left out.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	j := c.latest()
	for _, m := range c.job {
		if v, ok := m.value(j); ok {
			ch <- prometheus.MustNewConstMetric(m.desc, m.typ, v, j.Name)
		}
	}
	if ck := j.Checkpoints; ck != nil {
		h := &ck.Durations
		buckets := make(map[float64]uint64, len(h.Bounds))
		for i, b := range h.Bounds {
			buckets[b/1000] = h.Counts[i]
		}
		ch <- prometheus.MustNewConstHistogram(c.durations, h.Count, h.Sum/1000, buckets, j.Name)
	}
	for vi := range j.Vertices {
		v := &j.Vertices[vi]
		for ti := range v.Subtasks {
			t := &v.Subtasks[ti]
			if t.State == "unknown" {
				continue
			}
			sub := strconv.Itoa(t.Subtask)
			for _, m := range c.task {
				ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.value(t), j.Name, v.ID, v.Name, sub)
			}
			for i, op := range t.Operators {
				name := op.Name
				for _, o := range t.Operators[:i] {
					if o.Name == op.Name {
						name = op.Name + " #" + strconv.Itoa(i+1) // label sets must differ
						break
					}
				}
				ch <- prometheus.MustNewConstMetric(c.late, prometheus.CounterValue, float64(op.NumLateRecordsDropped),
					j.Name, v.ID, v.Name, sub, name)
			}
		}
	}
}
