package cluster

import (
	"time"

	"github.com/weirstream/weir/network"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/task"
)

// MetricsReport carries the live metrics of a worker's tasks of one
// attempt. A worker sends one every metrics interval while it runs an
// attempt, so that the coordinator's dashboard and Prometheus endpoint
// show the whole job; the coordinator keeps the latest per task.
type MetricsReport struct {
	Attempt Attempt           `json:"Attempt"`
	Tasks   []LiveTaskMetrics `json:"Tasks"`
	// Runtime is the worker process's Go runtime figures, for the
	// coordinator's per-worker view (absent from older workers).
	Runtime *RuntimeMetrics `json:"Runtime,omitempty"`
}

// RuntimeMetrics is a worker process's Go runtime figures: heap,
// goroutines, GC. The control plane owns the wire form.
type RuntimeMetrics struct {
	HeapBytes             uint64 `json:"HeapBytes"`
	SysBytes              uint64 `json:"SysBytes"`
	Goroutines            int    `json:"Goroutines"`
	CPUs                  int    `json:"CPUs"`
	NumGC                 uint32 `json:"NumGC"`
	GCPauseTotalNanos     uint64 `json:"GCPauseTotalNanos"`
	MaxRecentGCPauseNanos uint64 `json:"MaxRecentGCPauseNanos"`
}

// LiveTaskMetrics is the wire form of a task.LiveMetrics. The control
// plane owns it: LiveTaskMetricsFrom and ToTask convert.
type LiveTaskMetrics struct {
	Task state.TaskKey `json:"Task"`
	Name string        `json:"Name"`
	// State is the task's lifecycle state: 0 created, then as
	// TaskStatus.State.
	State        TaskState `json:"State"`
	ElapsedNanos int64     `json:"ElapsedNanos"`

	RecordsIn          int64 `json:"RecordsIn"`
	RecordsOut         int64 `json:"RecordsOut"`
	BytesIn            int64 `json:"BytesIn"`
	BytesOut           int64 `json:"BytesOut"`
	BusyNanos          int64 `json:"BusyNanos"`
	IdleNanos          int64 `json:"IdleNanos"`
	BackPressuredNanos int64 `json:"BackPressuredNanos"`

	InputWatermark  int64 `json:"InputWatermark"`
	OutputWatermark int64 `json:"OutputWatermark"`

	Input  BufferUsage `json:"Input"`
	Output BufferUsage `json:"Output"`

	Operators []OperatorMetrics `json:"Operators,omitempty"`
}

// BufferUsage is the wire form of network.BufferUsage.
type BufferUsage struct {
	Queued   int `json:"Queued"`
	InUse    int `json:"InUse"`
	Capacity int `json:"Capacity"`
}

// OperatorMetrics is the wire form of task.OperatorMetrics.
type OperatorMetrics struct {
	Name               string `json:"Name"`
	LateRecordsDropped int64  `json:"LateRecordsDropped"`
}

var taskStates = [...]TaskState{task.Created: 0, task.Running: Running, task.Finished: Finished, task.Failed: Failed, task.Canceled: Canceled}

// LiveTaskMetricsFrom returns the wire form of m.
func LiveTaskMetricsFrom(m task.LiveMetrics) LiveTaskMetrics {
	l := LiveTaskMetrics{
		Task: m.Key, Name: m.Name, ElapsedNanos: int64(m.Elapsed),
		RecordsIn: m.RecordsIn, RecordsOut: m.RecordsOut, BytesIn: m.BytesIn, BytesOut: m.BytesOut,
		BusyNanos: int64(m.Busy), IdleNanos: int64(m.Idle), BackPressuredNanos: int64(m.BackPressured),
		InputWatermark: m.InputWatermark, OutputWatermark: m.OutputWatermark,
		Input:  BufferUsage(m.Input),
		Output: BufferUsage(m.Output),
	}
	if int(m.State) < len(taskStates) {
		l.State = taskStates[m.State]
	}
	for _, op := range m.Operators {
		l.Operators = append(l.Operators, OperatorMetrics(op))
	}
	return l
}

// ToTask returns the task.LiveMetrics m describes.
func (m LiveTaskMetrics) ToTask() task.LiveMetrics {
	l := task.LiveMetrics{
		Key: m.Task, Name: m.Name, Elapsed: time.Duration(m.ElapsedNanos),
		RecordsIn: m.RecordsIn, RecordsOut: m.RecordsOut, BytesIn: m.BytesIn, BytesOut: m.BytesOut,
		Busy: time.Duration(m.BusyNanos), Idle: time.Duration(m.IdleNanos), BackPressured: time.Duration(m.BackPressuredNanos),
		InputWatermark: m.InputWatermark, OutputWatermark: m.OutputWatermark,
		Input:  network.BufferUsage(m.Input),
		Output: network.BufferUsage(m.Output),
	}
	for s, ts := range taskStates {
		if ts == m.State {
			l.State = task.State(s)
		}
	}
	for _, op := range m.Operators {
		l.Operators = append(l.Operators, task.OperatorMetrics(op))
	}
	return l
}
