// Package metrics defines the snapshot of a running job's metrics that
// weir publishes: a Job, its operators (Vertex) and their subtasks (Task),
// and its checkpoints, with Apache Flink's metric names. The root
// package's Job.Metrics returns one (weir.JobMetrics); its JSON form is
// the dashboard's API (docs/dashboard.md). The runtime fills these types;
// this package only defines them.
package metrics

import "time"

// Job is a snapshot of one job's metrics: the job, each of its operators
// (vertices: chains of operators that run as one task per subtask) and
// their subtasks, and its checkpoints. Names follow Flink's metrics; the
// JSON form is the dashboard's API (docs/dashboard.md). A Job is
// immutable once published: readers share it.
type Job struct {
	Name string `json:"name"`
	// State is "created", "running", "restarting", "finished",
	// "failed" or "canceled".
	State string `json:"state"`
	// Time is when the snapshot was taken; StartTime when the job started.
	Time      time.Time `json:"time"`
	StartTime time.Time `json:"startTime"`
	// Uptime is how long the job has been running without interruption,
	// in ms: since its current attempt was deployed (0 while it is not
	// running). Flink's uptime.
	Uptime int64 `json:"uptime"`
	// NumRestarts counts the restarts after failures (Flink's
	// numRestarts).
	NumRestarts int `json:"numRestarts"`
	// Attempt numbers the current deployment (0, 1, …).
	Attempt int `json:"attempt"`
	// LatestException is the failure that caused the latest restart, or
	// that failed the job (nil: none).
	LatestException *Exception `json:"latestException"`
	// Checkpoints is nil for a job without checkpointing.
	Checkpoints *Checkpoints `json:"checkpoints"`
	// Vertices are the job's operators, sources first, in the order the
	// program built them.
	Vertices []Vertex `json:"vertices"`
}

// Exception is a failure of the job.
type Exception struct {
	Time    time.Time `json:"time"`
	Message string    `json:"message"`
}

// Vertex is one operator of the job graph (a chain of the program's
// operators, named "a -> b" as Flink names chains) with its subtasks.
// The rates are the subtasks' sums; busy and back-pressured time are the
// highest among the subtasks, as Flink's job graph colours them.
type Vertex struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Parallelism int    `json:"parallelism"`
	// Operators are the chained operators' names, head first.
	Operators []string `json:"operators"`
	// Inputs are the vertices this one reads (none for a source).
	Inputs []Input `json:"inputs"`

	NumRecordsIn           int64   `json:"numRecordsIn"`
	NumRecordsOut          int64   `json:"numRecordsOut"`
	NumRecordsInPerSecond  float64 `json:"numRecordsInPerSecond"`
	NumRecordsOutPerSecond float64 `json:"numRecordsOutPerSecond"`
	// BusyTimeMsPerSecond and BackPressuredTimeMsPerSecond are the
	// highest of the subtasks'.
	BusyTimeMsPerSecond          float64 `json:"busyTimeMsPerSecond"`
	BackPressuredTimeMsPerSecond float64 `json:"backPressuredTimeMsPerSecond"`
	// BackPressure is Flink's back-pressure level from the highest
	// back-pressured time: "ok" (≤ 10 %), "low" (≤ 50 %) or "high".
	BackPressure string `json:"backPressure"`
	// Subtasks are the vertex's tasks, by subtask index.
	Subtasks []Task `json:"subtasks"`
}

// Input is an edge of the job graph.
type Input struct {
	// ID is the producing vertex.
	ID string `json:"id"`
	// Partitioning is "forward", "rebalance", "hash" or "broadcast".
	Partitioning string `json:"partitioning"`
}

// Task is one subtask of a vertex.
type Task struct {
	Subtask int    `json:"subtask"`
	Name    string `json:"name"`
	// State is "created", "running", "finished", "failed", "canceled",
	// or "unknown" when no metrics were received for it.
	State string `json:"state"`
	// Location is where the subtask runs: "local", or a worker's ID.
	Location string `json:"location"`

	NumRecordsIn  int64 `json:"numRecordsIn"`
	NumRecordsOut int64 `json:"numRecordsOut"`
	NumBytesIn    int64 `json:"numBytesIn"`
	NumBytesOut   int64 `json:"numBytesOut"`

	NumRecordsInPerSecond  float64 `json:"numRecordsInPerSecond"`
	NumRecordsOutPerSecond float64 `json:"numRecordsOutPerSecond"`
	NumBytesInPerSecond    float64 `json:"numBytesInPerSecond"`
	NumBytesOutPerSecond   float64 `json:"numBytesOutPerSecond"`

	// The three add up to about 1000.
	BusyTimeMsPerSecond          float64 `json:"busyTimeMsPerSecond"`
	IdleTimeMsPerSecond          float64 `json:"idleTimeMsPerSecond"`
	BackPressuredTimeMsPerSecond float64 `json:"backPressuredTimeMsPerSecond"`
	// The busy, idle and back-pressured time of the subtask so far, in
	// ms (Flink's accumulated-*-time).
	AccumulatedBusyTime          int64 `json:"accumulatedBusyTime"`
	AccumulatedIdleTime          int64 `json:"accumulatedIdleTime"`
	AccumulatedBackPressuredTime int64 `json:"accumulatedBackPressuredTime"`

	// InPoolUsage and OutPoolUsage are the fractions (0 to 1) of the
	// input and output buffers in use; the queue lengths count the
	// buffers queued.
	InPoolUsage       float64 `json:"inPoolUsage"`
	OutPoolUsage      float64 `json:"outPoolUsage"`
	InputQueueLength  int     `json:"inputQueueLength"`
	OutputQueueLength int     `json:"outputQueueLength"`

	// CheckpointAlignmentTime (ns) and CheckpointStartDelayNanos are
	// those of the latest checkpoint the subtask acknowledged.
	CheckpointAlignmentTime   int64 `json:"checkpointAlignmentTime"`
	CheckpointStartDelayNanos int64 `json:"checkpointStartDelayNanos"`

	// CurrentInputWatermark and CurrentOutputWatermark are event-time
	// watermarks in unix ms (math.MinInt64: none yet).
	CurrentInputWatermark  int64 `json:"currentInputWatermark"`
	CurrentOutputWatermark int64 `json:"currentOutputWatermark"`
	// NumLateRecordsDropped sums the late records the subtask's window
	// operators dropped; Operators has them one by one.
	NumLateRecordsDropped int64      `json:"numLateRecordsDropped"`
	Operators             []Operator `json:"operators,omitempty"`
}

// Operator is an operator of a subtask's chain with metrics of its own.
type Operator struct {
	Name                  string `json:"name"`
	NumLateRecordsDropped int64  `json:"numLateRecordsDropped"`
}

// Checkpoints are the job's checkpoint metrics.
type Checkpoints struct {
	NumberOfCompletedCheckpoints int `json:"numberOfCompletedCheckpoints"`
	NumberOfFailedCheckpoints    int `json:"numberOfFailedCheckpoints"`
	// NumberOfAbortedCheckpoints counts those pending when the job
	// finished: aborted by its end, not failed.
	NumberOfAbortedCheckpoints    int `json:"numberOfAbortedCheckpoints"`
	NumberOfInProgressCheckpoints int `json:"numberOfInProgressCheckpoints"`
	// LastCheckpointDuration (ms) and LastCheckpointSize (bytes) are the
	// latest completed checkpoint's (-1: none).
	LastCheckpointDuration int64 `json:"lastCheckpointDuration"`
	LastCheckpointSize     int64 `json:"lastCheckpointSize"`
	// LastCheckpointRestoreTimestamp is when the job last restored from
	// a checkpoint or savepoint, in unix ms (-1: never).
	LastCheckpointRestoreTimestamp int64 `json:"lastCheckpointRestoreTimestamp"`
	// Summary sums up the durations of the completed checkpoints in
	// History.
	Summary Summary `json:"summary"`
	// History holds the latest checkpoints and savepoints, newest first.
	History []Checkpoint `json:"history"`
	// Durations counts the completed checkpoints (not savepoints) by
	// duration, since the job started.
	Durations Histogram `json:"durations"`
}

// Histogram counts values by bucket, as a Prometheus histogram:
// Counts[i] counts the values at most Bounds[i] (cumulative), Count all
// of them, Sum adds them up. Checkpoint durations are in ms.
type Histogram struct {
	Bounds []float64 `json:"bounds"`
	Counts []uint64  `json:"counts"`
	Count  uint64    `json:"count"`
	Sum    float64   `json:"sum"`
}

// Summary is the minimum, average and maximum duration (ms) of Count
// completed checkpoints.
type Summary struct {
	Count int   `json:"count"`
	Min   int64 `json:"min"`
	Avg   int64 `json:"avg"`
	Max   int64 `json:"max"`
}

// Checkpoint is one checkpoint or savepoint.
type Checkpoint struct {
	ID uint64 `json:"id"`
	// Kind is "checkpoint" or "savepoint".
	Kind string `json:"kind"`
	// Status is "in progress", "completed" or "failed".
	Status       string    `json:"status"`
	Acknowledged int       `json:"acknowledged"`
	Total        int       `json:"total"`
	TriggerTime  time.Time `json:"triggerTime"`
	// Duration is from the trigger to completion or failure (so far, for
	// one in progress), in ms.
	Duration int64 `json:"duration"`
	// Size is the bytes the acknowledged subtasks persisted.
	Size int64 `json:"size"`
	// AlignmentTime is the longest alignment of a subtask, in ms.
	AlignmentTime int64  `json:"alignmentTime"`
	SavepointPath string `json:"savepointPath,omitempty"`
	Failure       string `json:"failure,omitempty"`
}

// Clone returns a deep copy of j.
func (j *Job) Clone() *Job {
	c := *j
	if e := j.LatestException; e != nil {
		x := *e
		c.LatestException = &x
	}
	if ck := j.Checkpoints; ck != nil {
		x := *ck
		x.History = append([]Checkpoint(nil), ck.History...)
		x.Durations.Bounds = append([]float64(nil), ck.Durations.Bounds...)
		x.Durations.Counts = append([]uint64(nil), ck.Durations.Counts...)
		c.Checkpoints = &x
	}
	c.Vertices = make([]Vertex, len(j.Vertices))
	for i, v := range j.Vertices {
		v.Operators = append([]string(nil), v.Operators...)
		v.Inputs = append([]Input(nil), v.Inputs...)
		subs := make([]Task, len(v.Subtasks))
		for k, t := range v.Subtasks {
			t.Operators = append([]Operator(nil), t.Operators...)
			subs[k] = t
		}
		v.Subtasks = subs
		c.Vertices[i] = v
	}
	return &c
}
