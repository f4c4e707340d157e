package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/metrics"
	"github.com/weirstream/weir/state"
)

// maxBody bounds the body of an action request.
const maxBody = 64 << 10

// restAPI serves Flink's REST API for one job (docs/rest.md): the reads
// from the latest metrics snapshot and the job's statistics, the actions
// through Control, each as an asynchronous operation.
type restAPI struct {
	ctl    Control
	latest func() *metrics.Job
	ops    *operations
	// stopped is called when a stop or a cancel was accepted; read when
	// the outcome of a finished stop was answered.
	stopped, read func()
}

func (a *restAPI) register(mux *http.ServeMux) {
	mux.HandleFunc("GET /jobs", a.jobs)
	mux.HandleFunc("GET /jobs/overview", a.overview)
	mux.HandleFunc("GET /jobs/{jobid}", a.withJob(a.details))
	mux.HandleFunc("PATCH /jobs/{jobid}", a.withJob(a.terminate))
	mux.HandleFunc("GET /jobs/{jobid}/config", a.withJob(a.config))
	mux.HandleFunc("GET /jobs/{jobid}/exceptions", a.withJob(a.exceptions))
	mux.HandleFunc("GET /jobs/{jobid}/checkpoints", a.withJob(a.checkpoints))
	mux.HandleFunc("POST /jobs/{jobid}/checkpoints", a.withJob(a.triggerCheckpoint))
	mux.HandleFunc("GET /jobs/{jobid}/checkpoints/{triggerid}", a.withJob(a.checkpointStatus))
	mux.HandleFunc("GET /jobs/{jobid}/checkpoints/details/{checkpointid}", a.withJob(a.checkpointDetails))
	mux.HandleFunc("GET /jobs/{jobid}/checkpoints/details/{checkpointid}/subtasks/{vertexid}", a.withJob(a.checkpointSubtasks))
	mux.HandleFunc("POST /jobs/{jobid}/savepoints", a.withJob(a.triggerSavepoint))
	mux.HandleFunc("GET /jobs/{jobid}/savepoints/{triggerid}", a.withJob(a.savepointStatus))
	mux.HandleFunc("POST /jobs/{jobid}/stop", a.withJob(a.stop))
	mux.HandleFunc("GET /jobs/{jobid}/vertices/{vertexid}", a.withJob(a.vertex))
	mux.HandleFunc("GET /jobs/{jobid}/vertices/{vertexid}/watermarks", a.withJob(a.watermarks))
	mux.HandleFunc("GET /taskmanagers", a.taskManagers)
}

// taskManagerInfo is Flink's TaskManagerInfo of one worker, with weir's
// tasks and Go runtime figures.
type taskManagerInfo struct {
	ID   string `json:"id"`
	Path string `json:"path"`
	// DataPort is the data plane's port (-1: none, the local process).
	DataPort int `json:"dataPort"`
	// TimeSinceLastHeartbeat is, as Flink's, the time of the latest
	// report (unix ms; -1: none yet).
	TimeSinceLastHeartbeat int64 `json:"timeSinceLastHeartbeat"`
	SlotsNumber            int   `json:"slotsNumber"`
	FreeSlots              int   `json:"freeSlots"`
	Hardware               struct {
		CPUCores       int   `json:"cpuCores"`
		PhysicalMemory int64 `json:"physicalMemory"`
		FreeMemory     int64 `json:"freeMemory"`
		ManagedMemory  int64 `json:"managedMemory"`
	} `json:"hardware"`
	// weir's own.
	Peer    string          `json:"peer,omitempty"`
	Tasks   int             `json:"tasks"`
	Runtime metrics.Runtime `json:"runtime"`
}

// taskManagers is Flink's GET /taskmanagers: the processes that run the
// job's tasks.
func (a *restAPI) taskManagers(w http.ResponseWriter, r *http.Request) {
	out := []taskManagerInfo{}
	for _, wk := range a.ctl.Workers() {
		tm := taskManagerInfo{ID: wk.ID, Path: wk.DataAddr, DataPort: -1, TimeSinceLastHeartbeat: unixMs(wk.Reported),
			SlotsNumber: wk.Tasks, Peer: wk.Peer, Tasks: wk.Tasks, Runtime: wk.Runtime}
		if _, port, err := net.SplitHostPort(wk.DataAddr); err == nil {
			if p, err := strconv.Atoi(port); err == nil {
				tm.DataPort = p
			}
		}
		if tm.Path == "" {
			tm.Path = wk.ID
		}
		tm.Hardware.CPUCores = wk.Runtime.CPUs
		// Not known to weir: the machine's memory, Flink's managed memory.
		tm.Hardware.PhysicalMemory, tm.Hardware.FreeMemory, tm.Hardware.ManagedMemory = -1, -1, -1
		out = append(out, tm)
	}
	writeJSON(w, map[string][]taskManagerInfo{"taskmanagers": out})
}

// withJob answers 404 for another job's ID.
func (a *restAPI) withJob(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if id := r.PathValue("jobid"); id != a.ctl.JobID() {
			restError(w, http.StatusNotFound, fmt.Sprintf("job %q not found", id))
			return
		}
		h(w, r)
	}
}

// Flink's job states (JobStatus).
func flinkState(s string) string {
	switch s {
	case "canceling":
		return "CANCELLING"
	case "stopping":
		return "RUNNING" // Flink's stop-with-savepoint runs until its savepoint completed
	case "":
		return "CREATED"
	}
	return strings.ToUpper(s)
}

// ended reports whether state is final.
func ended(state string) bool {
	return state == "finished" || state == "failed" || state == "canceled"
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return -1
	}
	return t.UnixMilli()
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// times returns the job's start and end (-1 while it runs) in unix ms and
// its duration in ms.
func times(j *metrics.Job) (start, end, duration int64) {
	start, end = unixMs(j.StartTime), -1
	last := time.Now()
	if ended(j.State) {
		end, last = unixMs(j.Time), j.Time
	}
	return start, end, ms(last.Sub(j.StartTime))
}

// taskCounts counts subtasks by Flink's execution states.
func taskCounts(vs []metrics.Vertex) map[string]int {
	c := map[string]int{}
	for _, k := range []string{"CREATED", "SCHEDULED", "DEPLOYING", "INITIALIZING", "RUNNING", "FINISHED",
		"CANCELING", "CANCELED", "FAILED", "RECONCILING"} {
		c[k] = 0
	}
	for _, v := range vs {
		for _, t := range v.Subtasks {
			s := strings.ToUpper(t.State)
			if s == "UNKNOWN" {
				s = "SCHEDULED" // no metrics received for it yet
			}
			c[s]++
		}
	}
	return c
}

// jobDetails is Flink's JobDetails, one job of /jobs/overview.
type jobDetails struct {
	JID              string         `json:"jid"`
	Name             string         `json:"name"`
	State            string         `json:"state"`
	StartTime        int64          `json:"start-time"`
	EndTime          int64          `json:"end-time"`
	Duration         int64          `json:"duration"`
	LastModification int64          `json:"last-modification"`
	Tasks            map[string]int `json:"tasks"`
}

func (a *restAPI) summary(j *metrics.Job) jobDetails {
	start, end, dur := times(j)
	counts := taskCounts(j.Vertices)
	tasks := map[string]int{"total": 0}
	for k, n := range counts {
		tasks[strings.ToLower(k)] = n
		tasks["total"] += n
	}
	return jobDetails{JID: a.ctl.JobID(), Name: j.Name, State: flinkState(a.state(j)), StartTime: start, EndTime: end,
		Duration: dur, LastModification: unixMs(j.Time), Tasks: tasks}
}

// state is the job's live state, the snapshot's once it ended.
func (a *restAPI) state(j *metrics.Job) string {
	if ended(j.State) {
		return j.State
	}
	return a.ctl.Status().State
}

func (a *restAPI) jobs(w http.ResponseWriter, r *http.Request) {
	type idStatus struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	j := a.latest()
	writeJSON(w, map[string][]idStatus{"jobs": {{ID: a.ctl.JobID(), Status: flinkState(a.state(j))}}})
}

func (a *restAPI) overview(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string][]jobDetails{"jobs": {a.summary(a.latest())}})
}

// ioMetrics is Flink's IOMetricsInfo of a vertex.
type ioMetrics struct {
	ReadBytes            int64 `json:"read-bytes"`
	ReadBytesComplete    bool  `json:"read-bytes-complete"`
	WriteBytes           int64 `json:"write-bytes"`
	WriteBytesComplete   bool  `json:"write-bytes-complete"`
	ReadRecords          int64 `json:"read-records"`
	ReadRecordsComplete  bool  `json:"read-records-complete"`
	WriteRecords         int64 `json:"write-records"`
	WriteRecordsComplete bool  `json:"write-records-complete"`
	// The time (ms) the subtasks were back-pressured, idle and busy,
	// added up since they started.
	AccumulatedBackPressured int64 `json:"accumulated-backpressured-time"`
	AccumulatedIdle          int64 `json:"accumulated-idle-time"`
	AccumulatedBusy          int64 `json:"accumulated-busy-time"`
}

// ioOf is a subtask's IOMetricsInfo.
func ioOf(t *metrics.Task) ioMetrics {
	return ioMetrics{ReadBytes: t.NumBytesIn, WriteBytes: t.NumBytesOut, ReadRecords: t.NumRecordsIn,
		WriteRecords: t.NumRecordsOut, ReadBytesComplete: true, WriteBytesComplete: true, ReadRecordsComplete: true,
		WriteRecordsComplete: true, AccumulatedBackPressured: t.AccumulatedBackPressuredTime,
		AccumulatedIdle: t.AccumulatedIdleTime, AccumulatedBusy: t.AccumulatedBusyTime}
}

type vertexInfo struct {
	ID             string         `json:"id"`
	Name           string         `json:"name"`
	MaxParallelism int            `json:"maxParallelism"`
	Parallelism    int            `json:"parallelism"`
	Status         string         `json:"status"`
	StartTime      int64          `json:"start-time"`
	EndTime        int64          `json:"end-time"`
	Duration       int64          `json:"duration"`
	Tasks          map[string]int `json:"tasks"`
	Metrics        ioMetrics      `json:"metrics"`
}

// vertexStatus is a vertex's execution state from its subtasks': the
// least advanced, failed and canceled first.
func vertexStatus(v *metrics.Vertex) string {
	st := map[string]bool{}
	for _, t := range v.Subtasks {
		st[t.State] = true
	}
	for _, s := range []string{"failed", "canceled", "created", "unknown", "running"} {
		if st[s] {
			if s == "unknown" {
				return "SCHEDULED"
			}
			return strings.ToUpper(s)
		}
	}
	if st["finished"] {
		return "FINISHED"
	}
	return "CREATED"
}

func vertexIO(v *metrics.Vertex) ioMetrics {
	m := ioMetrics{ReadBytesComplete: true, WriteBytesComplete: true, ReadRecordsComplete: true, WriteRecordsComplete: true}
	for _, t := range v.Subtasks {
		if t.State == "unknown" {
			m.ReadBytesComplete, m.WriteBytesComplete, m.ReadRecordsComplete, m.WriteRecordsComplete = false, false, false, false
		}
		m.ReadBytes += t.NumBytesIn
		m.WriteBytes += t.NumBytesOut
		m.ReadRecords += t.NumRecordsIn
		m.WriteRecords += t.NumRecordsOut
		m.AccumulatedBackPressured += t.AccumulatedBackPressuredTime
		m.AccumulatedIdle += t.AccumulatedIdleTime
		m.AccumulatedBusy += t.AccumulatedBusyTime
	}
	return m
}

type planInput struct {
	Num          int    `json:"num"`
	ID           string `json:"id"`
	ShipStrategy string `json:"ship_strategy"`
	Exchange     string `json:"exchange"`
}

type planNode struct {
	ID          string      `json:"id"`
	Parallelism int         `json:"parallelism"`
	Operator    string      `json:"operator"`
	Description string      `json:"description"`
	Inputs      []planInput `json:"inputs,omitempty"`
}

type jobPlan struct {
	JID   string     `json:"jid"`
	Name  string     `json:"name"`
	Type  string     `json:"type"`
	Nodes []planNode `json:"nodes"`
}

type jobDetailsInfo struct {
	JID            string           `json:"jid"`
	Name           string           `json:"name"`
	IsStoppable    bool             `json:"isStoppable"`
	State          string           `json:"state"`
	JobType        string           `json:"job-type"`
	StartTime      int64            `json:"start-time"`
	EndTime        int64            `json:"end-time"`
	Duration       int64            `json:"duration"`
	MaxParallelism int              `json:"maxParallelism"`
	Now            int64            `json:"now"`
	Timestamps     map[string]int64 `json:"timestamps"`
	Vertices       []vertexInfo     `json:"vertices"`
	StatusCounts   map[string]int   `json:"status-counts"`
	Plan           jobPlan          `json:"plan"`
	// weir's own: restarts and the current attempt.
	NumRestarts int `json:"numRestarts"`
	Attempt     int `json:"attempt"`
}

func (a *restAPI) details(w http.ResponseWriter, r *http.Request) {
	j := a.latest()
	s := a.summary(j)
	st := a.ctl.Status()
	_, ckpt := a.ctl.Checkpoints()
	// The job's number of key groups (WithMaxParallelism), every
	// vertex's as well.
	maxPar, err := strconv.Atoi(a.ctl.Options()["maxParallelism"])
	if err != nil {
		maxPar = -1
	}
	d := jobDetailsInfo{JID: s.JID, Name: s.Name, State: s.State, JobType: "STREAMING", StartTime: s.StartTime,
		EndTime: s.EndTime, Duration: s.Duration, MaxParallelism: maxPar, Now: time.Now().UnixMilli(),
		IsStoppable: ckpt && !ended(st.State), StatusCounts: taskCounts(j.Vertices),
		Timestamps: map[string]int64{"CREATED": s.StartTime},
		Plan:       jobPlan{JID: s.JID, Name: s.Name, Type: "STREAMING"}, NumRestarts: j.NumRestarts, Attempt: j.Attempt}
	if !st.Running.IsZero() {
		d.Timestamps["RUNNING"] = st.Running.UnixMilli()
	}
	if ended(j.State) {
		d.Timestamps[flinkState(j.State)] = s.EndTime
	}
	for i := range j.Vertices {
		v := &j.Vertices[i]
		counts := taskCounts(j.Vertices[i : i+1])
		d.Vertices = append(d.Vertices, vertexInfo{ID: v.ID, Name: v.Name, MaxParallelism: maxPar, Parallelism: v.Parallelism,
			Status: vertexStatus(v), StartTime: s.StartTime, EndTime: s.EndTime, Duration: s.Duration, Tasks: counts,
			Metrics: vertexIO(v)})
		n := planNode{ID: v.ID, Parallelism: v.Parallelism, Operator: "", Description: v.Name}
		for k, in := range v.Inputs {
			n.Inputs = append(n.Inputs, planInput{Num: k, ID: in.ID, ShipStrategy: strings.ToUpper(in.Partitioning),
				Exchange: "pipelined_bounded"})
		}
		d.Plan.Nodes = append(d.Plan.Nodes, n)
	}
	writeJSON(w, d)
}

func (a *restAPI) vertex(w http.ResponseWriter, r *http.Request) {
	v, ok := a.findVertex(w, r)
	if !ok {
		return
	}
	type subtaskInfo struct {
		Subtask  int       `json:"subtask"`
		Status   string    `json:"status"`
		Attempt  int       `json:"attempt"`
		Endpoint string    `json:"endpoint"`
		Metrics  ioMetrics `json:"metrics"`
		// weir's own: every metric of the subtask.
		Detail metrics.Task `json:"weir"`
	}
	j := a.latest()
	out := struct {
		ID          string        `json:"id"`
		Name        string        `json:"name"`
		Parallelism int           `json:"parallelism"`
		Now         int64         `json:"now"`
		Subtasks    []subtaskInfo `json:"subtasks"`
	}{ID: v.ID, Name: v.Name, Parallelism: v.Parallelism, Now: time.Now().UnixMilli()}
	for _, t := range v.Subtasks {
		st := strings.ToUpper(t.State)
		if st == "UNKNOWN" {
			st = "SCHEDULED"
		}
		out.Subtasks = append(out.Subtasks, subtaskInfo{Subtask: t.Subtask, Status: st, Attempt: j.Attempt, Endpoint: t.Location,
			Metrics: ioOf(&t), Detail: t})
	}
	writeJSON(w, out)
}

func (a *restAPI) findVertex(w http.ResponseWriter, r *http.Request) (*metrics.Vertex, bool) {
	id := r.PathValue("vertexid")
	j := a.latest()
	for i := range j.Vertices {
		if j.Vertices[i].ID == id {
			return &j.Vertices[i], true
		}
	}
	restError(w, http.StatusNotFound, fmt.Sprintf("vertex %q not found", id))
	return nil, false
}

// metric is one entry of Flink's metric lists.
type metric struct {
	ID    string `json:"id"`
	Value string `json:"value"`
}

// watermarks answers Flink's list of each subtask's input watermark
// ("0.currentInputWatermark"), with weir's output watermark beside it.
func (a *restAPI) watermarks(w http.ResponseWriter, r *http.Request) {
	v, ok := a.findVertex(w, r)
	if !ok {
		return
	}
	out := []metric{}
	for _, t := range v.Subtasks {
		if t.State == "unknown" {
			continue
		}
		i := strconv.Itoa(t.Subtask)
		out = append(out, metric{ID: i + ".currentInputWatermark", Value: strconv.FormatInt(t.CurrentInputWatermark, 10)},
			metric{ID: i + ".currentOutputWatermark", Value: strconv.FormatInt(t.CurrentOutputWatermark, 10)})
	}
	writeJSON(w, out)
}

func (a *restAPI) config(w http.ResponseWriter, r *http.Request) {
	j := a.latest()
	opts := a.ctl.Options()
	par, _ := strconv.Atoi(opts["parallelism"])
	type execConfig struct {
		Parallelism     int               `json:"job-parallelism"`
		ObjectReuse     bool              `json:"object-reuse-mode"`
		RestartStrategy string            `json:"restart-strategy"`
		UserConfig      map[string]string `json:"user-config"`
	}
	writeJSON(w, struct {
		JID    string     `json:"jid"`
		Name   string     `json:"name"`
		Config execConfig `json:"execution-config"`
	}{JID: a.ctl.JobID(), Name: j.Name, Config: execConfig{Parallelism: par, RestartStrategy: opts["restartStrategy"],
		UserConfig: opts}})
}

// maxExceptionHistory is how many failures the job keeps.
const maxExceptionHistory = 32

type exceptionInfo struct {
	ExceptionName string            `json:"exceptionName"`
	Stacktrace    string            `json:"stacktrace"`
	Timestamp     int64             `json:"timestamp"`
	TaskName      *string           `json:"taskName"`
	Endpoint      *string           `json:"endpoint"`
	TaskManagerID *string           `json:"taskManagerId"`
	FailureLabels map[string]string `json:"failureLabels"`
	Concurrent    []exceptionInfo   `json:"concurrentExceptions"`
	// weir's own.
	Operator   string   `json:"operator,omitempty"`
	Chain      []string `json:"chain"`
	Stack      string   `json:"stack,omitempty"`
	Restarting bool     `json:"restarting"`
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// stacktrace writes a failure as Java writes an exception: the error,
// "Caused by:" each error it wraps, then the stack of a panic.
func stacktrace(f *metrics.Failure) string {
	var b strings.Builder
	for i, c := range f.Chain {
		if i > 0 {
			b.WriteString("Caused by: ")
		}
		b.WriteString(c)
		b.WriteByte('\n')
	}
	if f.Stack != "" {
		b.WriteString(f.Stack)
	}
	return b.String()
}

func (a *restAPI) exceptions(w http.ResponseWriter, r *http.Request) {
	limit := maxExceptionHistory
	if s := r.URL.Query().Get("maxExceptions"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			restError(w, http.StatusBadRequest, fmt.Sprintf("maxExceptions %q: not a non-negative integer", s))
			return
		}
		limit = n
	}
	fs := a.ctl.Failures()
	entries := []exceptionInfo{}
	for i := len(fs) - 1; i >= 0 && len(entries) < limit; i-- {
		f := &fs[i]
		loc := optional(f.Location)
		entries = append(entries, exceptionInfo{ExceptionName: f.Type, Stacktrace: stacktrace(f), Timestamp: f.Time.UnixMilli(),
			TaskName: optional(f.Task), Endpoint: loc, TaskManagerID: loc, FailureLabels: map[string]string{},
			Concurrent: []exceptionInfo{}, Operator: f.Operator, Chain: f.Chain, Stack: f.Stack, Restarting: f.Restarting})
	}
	out := struct {
		RootException *string         `json:"root-exception"`
		Timestamp     *int64          `json:"timestamp"`
		AllExceptions []exceptionInfo `json:"all-exceptions"`
		Truncated     bool            `json:"truncated"`
		History       struct {
			Entries   []exceptionInfo `json:"entries"`
			Truncated bool            `json:"truncated"`
		} `json:"exceptionHistory"`
	}{AllExceptions: []exceptionInfo{}}
	if len(fs) > 0 {
		latest := &fs[len(fs)-1]
		st, ts := stacktrace(latest), latest.Time.UnixMilli()
		out.RootException, out.Timestamp = &st, &ts
	}
	out.History.Entries = entries
	out.History.Truncated = len(entries) < len(fs)
	out.Truncated = out.History.Truncated
	writeJSON(w, out)
}

// statsSummary is Flink's StatsSummaryDto.
type statsSummary struct {
	Min  int64   `json:"min"`
	Max  int64   `json:"max"`
	Avg  int64   `json:"avg"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
}

func summarize(vs []int64) statsSummary {
	if len(vs) == 0 {
		return statsSummary{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	var sum int64
	for _, v := range s {
		sum += v
	}
	q := func(p float64) float64 { return float64(s[int(math.Ceil(p*float64(len(s))))-1]) }
	return statsSummary{Min: s[0], Max: s[len(s)-1], Avg: sum / int64(len(s)), P50: q(0.5), P90: q(0.9), P95: q(0.95),
		P99: q(0.99), P999: q(0.999)}
}

type checkpointDuration struct {
	Sync  int64 `json:"sync"`
	Async int64 `json:"async"`
}

type checkpointAlignment struct {
	Buffered  int64 `json:"buffered"`
	Processed int64 `json:"processed"`
	Persisted int64 `json:"persisted"`
	Duration  int64 `json:"duration"`
}

// subtaskCheckpoint is Flink's SubtaskCheckpointStatistics: completed
// (acknowledged) or pending_or_failed.
type subtaskCheckpoint struct {
	Index            int                  `json:"index"`
	Status           string               `json:"status"`
	AckTimestamp     *int64               `json:"ack_timestamp,omitempty"`
	EndToEndDuration *int64               `json:"end_to_end_duration,omitempty"`
	StateSize        *int64               `json:"state_size,omitempty"`
	CheckpointedSize *int64               `json:"checkpointed_size,omitempty"`
	Checkpoint       *checkpointDuration  `json:"checkpoint,omitempty"`
	Alignment        *checkpointAlignment `json:"alignment,omitempty"`
	StartDelay       *int64               `json:"start_delay,omitempty"`
	Unaligned        *bool                `json:"unaligned_checkpoint,omitempty"`
	Aborted          *bool                `json:"aborted,omitempty"`
}

// taskCheckpoint is Flink's TaskCheckpointStatistics of one vertex, with
// the subtasks (Flink's .../subtasks/{vertexid}) and their summary.
type taskCheckpoint struct {
	ID                 uint64              `json:"id"`
	Status             string              `json:"status"`
	LatestAckTimestamp int64               `json:"latest_ack_timestamp"`
	CheckpointedSize   int64               `json:"checkpointed_size"`
	StateSize          int64               `json:"state_size"`
	EndToEndDuration   int64               `json:"end_to_end_duration"`
	AlignmentBuffered  int64               `json:"alignment_buffered"`
	ProcessedData      int64               `json:"processed_data"`
	PersistedData      int64               `json:"persisted_data"`
	NumSubtasks        int                 `json:"num_subtasks"`
	NumAcknowledged    int                 `json:"num_acknowledged_subtasks"`
	Summary            *subtaskSummary     `json:"summary,omitempty"`
	Subtasks           []subtaskCheckpoint `json:"subtasks,omitempty"`
}

type subtaskSummary struct {
	StateSize        statsSummary `json:"state_size"`
	CheckpointedSize statsSummary `json:"checkpointed_size"`
	EndToEndDuration statsSummary `json:"end_to_end_duration"`
	Duration         struct {
		Sync  statsSummary `json:"sync"`
		Async statsSummary `json:"async"`
	} `json:"checkpoint_duration"`
	Alignment struct {
		Buffered  statsSummary `json:"buffered"`
		Processed statsSummary `json:"processed"`
		Persisted statsSummary `json:"persisted"`
		Duration  statsSummary `json:"duration"`
	} `json:"alignment"`
	StartDelay statsSummary `json:"start_delay"`
}

// checkpointStats is Flink's CheckpointStatistics (completed, failed or
// in_progress by className).
type checkpointStats struct {
	ClassName          string                     `json:"className"`
	ID                 uint64                     `json:"id"`
	Status             string                     `json:"status"`
	IsSavepoint        bool                       `json:"is_savepoint"`
	CheckpointType     string                     `json:"checkpoint_type"`
	TriggerTimestamp   int64                      `json:"trigger_timestamp"`
	LatestAckTimestamp int64                      `json:"latest_ack_timestamp"`
	StateSize          int64                      `json:"state_size"`
	CheckpointedSize   int64                      `json:"checkpointed_size"`
	EndToEndDuration   int64                      `json:"end_to_end_duration"`
	AlignmentBuffered  int64                      `json:"alignment_buffered"`
	ProcessedData      int64                      `json:"processed_data"`
	PersistedData      int64                      `json:"persisted_data"`
	NumSubtasks        int                        `json:"num_subtasks"`
	NumAcknowledged    int                        `json:"num_acknowledged_subtasks"`
	Tasks              map[string]*taskCheckpoint `json:"tasks"`
	ExternalPath       string                     `json:"external_path,omitempty"`
	Discarded          *bool                      `json:"discarded,omitempty"`
	FailureTimestamp   *int64                     `json:"failure_timestamp,omitempty"`
	FailureMessage     *string                    `json:"failure_message,omitempty"`
}

func ckStatus(s coordinator.Status) (className, status string) {
	switch s {
	case coordinator.Completed:
		return "completed", "COMPLETED"
	case coordinator.InProgress:
		return "in_progress", "IN_PROGRESS"
	}
	return "failed", "FAILED" // failed, or aborted by the job's end
}

// checkpointStatistics converts one checkpoint of the coordinator's
// history; with subtasks, each vertex lists its subtasks too.
func checkpointStatistics(cs *coordinator.CheckpointStats, vs []metrics.Vertex, subtasks bool) *checkpointStats {
	class, status := ckStatus(cs.Status)
	out := &checkpointStats{ClassName: class, ID: uint64(cs.ID), Status: status, IsSavepoint: cs.Kind == barrier.Savepoint,
		CheckpointType: "CHECKPOINT", TriggerTimestamp: unixMs(cs.TriggerTime), LatestAckTimestamp: -1,
		StateSize: cs.StateSize, CheckpointedSize: cs.StateSize, EndToEndDuration: ms(cs.Duration),
		NumSubtasks: cs.Tasks, NumAcknowledged: cs.Acknowledged, Tasks: map[string]*taskCheckpoint{}}
	if out.IsSavepoint {
		out.CheckpointType = "SAVEPOINT"
	}
	for _, v := range vs {
		tc := &taskCheckpoint{ID: out.ID, Status: status, LatestAckTimestamp: -1, NumSubtasks: v.Parallelism}
		var subs []subtaskCheckpoint
		for i := range v.Parallelism {
			ts, ok := cs.PerTask[state.TaskKey{Vertex: v.ID, Subtask: i}]
			if !ok {
				subs = append(subs, subtaskCheckpoint{Index: i, Status: "pending_or_failed"})
				continue
			}
			tc.NumAcknowledged++
			ack := unixMs(ts.AckTime)
			tc.LatestAckTimestamp = max(tc.LatestAckTimestamp, ack)
			tc.StateSize += ts.StateSize
			tc.CheckpointedSize += ts.StateSize
			tc.ProcessedData += ts.BytesProcessedDuringAlignment
			tc.PersistedData += ts.PersistedData
			tc.EndToEndDuration = max(tc.EndToEndDuration, ms(ts.AckTime.Sub(cs.TriggerTime)))
			if ts.Unaligned {
				out.CheckpointType = "UNALIGNED_CHECKPOINT"
			}
			e2e, size, delay := ms(ts.AckTime.Sub(cs.TriggerTime)), ts.StateSize, ms(ts.StartDelay)
			unaligned, aborted := ts.Unaligned, false
			subs = append(subs, subtaskCheckpoint{Index: i, Status: "completed", AckTimestamp: &ack, EndToEndDuration: &e2e,
				StateSize: &size, CheckpointedSize: &size,
				Checkpoint: &checkpointDuration{Sync: ms(ts.SyncDuration), Async: ms(ts.AsyncDuration)},
				Alignment: &checkpointAlignment{Processed: ts.BytesProcessedDuringAlignment, Persisted: ts.PersistedData,
					Duration: ms(ts.AlignmentDuration)},
				StartDelay: &delay, Unaligned: &unaligned, Aborted: &aborted})
		}
		out.LatestAckTimestamp = max(out.LatestAckTimestamp, tc.LatestAckTimestamp)
		out.ProcessedData += tc.ProcessedData
		out.PersistedData += tc.PersistedData
		if subtasks {
			tc.Subtasks = subs
			tc.Summary = summarizeSubtasks(subs)
		}
		out.Tasks[v.ID] = tc
	}
	switch cs.Status {
	case coordinator.Completed:
		f := false
		out.Discarded, out.ExternalPath = &f, cs.SavepointPath
	case coordinator.Failed, coordinator.Aborted:
		t := unixMs(cs.TriggerTime.Add(cs.Duration))
		msg := "unknown"
		if cs.Failure != nil {
			msg = cs.Failure.Error()
		}
		out.FailureTimestamp, out.FailureMessage = &t, &msg
	}
	return out
}

func summarizeSubtasks(subs []subtaskCheckpoint) *subtaskSummary {
	var size, e2e, syn, asy, proc, pers, align, delay []int64
	for _, s := range subs {
		if s.Status != "completed" {
			continue
		}
		size, e2e = append(size, *s.StateSize), append(e2e, *s.EndToEndDuration)
		syn, asy = append(syn, s.Checkpoint.Sync), append(asy, s.Checkpoint.Async)
		proc, pers = append(proc, s.Alignment.Processed), append(pers, s.Alignment.Persisted)
		align, delay = append(align, s.Alignment.Duration), append(delay, *s.StartDelay)
	}
	sum := &subtaskSummary{StateSize: summarize(size), CheckpointedSize: summarize(size), EndToEndDuration: summarize(e2e),
		StartDelay: summarize(delay)}
	sum.Duration.Sync, sum.Duration.Async = summarize(syn), summarize(asy)
	sum.Alignment.Processed, sum.Alignment.Persisted = summarize(proc), summarize(pers)
	sum.Alignment.Duration = summarize(align)
	sum.Alignment.Buffered = summarize(make([]int64, len(size)))
	return sum
}

// checkpointStatsOf returns the job's checkpoint statistics, or answers
// 404 for a job without checkpointing.
func (a *restAPI) checkpointStatsOf(w http.ResponseWriter) (coordinator.Stats, bool) {
	st, ok := a.ctl.Checkpoints()
	if !ok {
		restError(w, http.StatusNotFound, "the job does not checkpoint (WithCheckpointing)")
	}
	return st, ok
}

func (a *restAPI) checkpoints(w http.ResponseWriter, r *http.Request) {
	st, ok := a.checkpointStatsOf(w)
	if !ok {
		return
	}
	vs := a.latest().Vertices
	status := a.ctl.Status()
	type counts struct {
		Restored   int `json:"restored"`
		Total      int `json:"total"`
		InProgress int `json:"in_progress"`
		Completed  int `json:"completed"`
		Failed     int `json:"failed"`
	}
	type restored struct {
		RestoreTimestamp int64 `json:"restore_timestamp"`
	}
	type latest struct {
		Completed *checkpointStats `json:"completed"`
		Savepoint *checkpointStats `json:"savepoint"`
		Failed    *checkpointStats `json:"failed"`
		Restored  *restored        `json:"restored"`
	}
	out := struct {
		Counts  counts `json:"counts"`
		Summary struct {
			CheckpointedSize statsSummary `json:"checkpointed_size"`
			StateSize        statsSummary `json:"state_size"`
			EndToEndDuration statsSummary `json:"end_to_end_duration"`
			AlignmentBuf     statsSummary `json:"alignment_buffered"`
			ProcessedData    statsSummary `json:"processed_data"`
			PersistedData    statsSummary `json:"persisted_data"`
		} `json:"summary"`
		Latest  latest             `json:"latest"`
		History []*checkpointStats `json:"history"`
	}{Counts: counts{Restored: status.Restores, InProgress: st.InProgress, Completed: st.Completed, Failed: st.Failed + st.Aborted,
		Total: st.InProgress + st.Completed + st.Failed + st.Aborted}, History: []*checkpointStats{}}
	var size, dur, proc, pers []int64
	for i := range st.History {
		c := checkpointStatistics(&st.History[i], vs, false)
		out.History = append(out.History, c)
		if c.ClassName != "completed" {
			continue
		}
		size, dur = append(size, c.StateSize), append(dur, c.EndToEndDuration)
		proc, pers = append(proc, c.ProcessedData), append(pers, c.PersistedData)
		if c.IsSavepoint && out.Latest.Savepoint == nil {
			out.Latest.Savepoint = c
		}
	}
	out.Summary.CheckpointedSize, out.Summary.StateSize = summarize(size), summarize(size)
	out.Summary.EndToEndDuration = summarize(dur)
	out.Summary.ProcessedData, out.Summary.PersistedData = summarize(proc), summarize(pers)
	out.Summary.AlignmentBuf = summarize(make([]int64, len(size)))
	if c := st.LatestCompleted; c != nil {
		out.Latest.Completed = checkpointStatistics(c, vs, false)
	}
	if c := st.LatestFailed; c != nil {
		out.Latest.Failed = checkpointStatistics(c, vs, false)
	}
	if !status.Restored.IsZero() {
		out.Latest.Restored = &restored{RestoreTimestamp: status.Restored.UnixMilli()}
	}
	writeJSON(w, out)
}

// findCheckpoint returns the checkpoint of the path's ID from the history.
func (a *restAPI) findCheckpoint(w http.ResponseWriter, r *http.Request) (*coordinator.CheckpointStats, bool) {
	st, ok := a.checkpointStatsOf(w)
	if !ok {
		return nil, false
	}
	s := r.PathValue("checkpointid")
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		restError(w, http.StatusBadRequest, fmt.Sprintf("checkpoint ID %q: not a number", s))
		return nil, false
	}
	for i := range st.History {
		if uint64(st.History[i].ID) == id {
			return &st.History[i], true
		}
	}
	restError(w, http.StatusNotFound, fmt.Sprintf("checkpoint %d is not in the history (the last %d)", id, len(st.History)))
	return nil, false
}

func (a *restAPI) checkpointDetails(w http.ResponseWriter, r *http.Request) {
	if cs, ok := a.findCheckpoint(w, r); ok {
		writeJSON(w, checkpointStatistics(cs, a.latest().Vertices, true))
	}
}

func (a *restAPI) checkpointSubtasks(w http.ResponseWriter, r *http.Request) {
	cs, ok := a.findCheckpoint(w, r)
	if !ok {
		return
	}
	v, ok := a.findVertex(w, r)
	if !ok {
		return
	}
	writeJSON(w, checkpointStatistics(cs, []metrics.Vertex{*v}, true).Tasks[v.ID])
}

// readBody decodes an action's optional JSON body into v; false after
// answering 400.
func readBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			restError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body exceeds %d bytes", maxBody))
			return false
		}
		restError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return false
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return true
	}
	if err := json.Unmarshal(body, v); err != nil {
		restError(w, http.StatusBadRequest, "the body is not the expected JSON: "+err.Error())
		return false
	}
	return true
}

// canAct answers 409 unless the job is running and checkpoints.
func (a *restAPI) canAct(w http.ResponseWriter, what string) bool {
	if _, ok := a.ctl.Checkpoints(); !ok {
		restError(w, http.StatusConflict, what+": the job does not checkpoint (WithCheckpointing)")
		return false
	}
	if st := a.ctl.Status().State; st != "running" {
		restError(w, http.StatusConflict, fmt.Sprintf("%s: the job is %s", what, st))
		return false
	}
	return true
}

// accepted answers an operation's trigger ID, or the reason it was not
// started.
func (a *restAPI) accepted(w http.ResponseWriter, o *operation, err error) {
	if err != nil {
		restError(w, http.StatusTooManyRequests, err.Error())
		return
	}
	writeJSONStatus(w, http.StatusAccepted, map[string]string{"request-id": o.id})
}

func (a *restAPI) triggerSavepoint(w http.ResponseWriter, r *http.Request) {
	var req struct {
		TargetDirectory string `json:"target-directory"`
		CancelJob       bool   `json:"cancel-job"`
	}
	if !readBody(w, r, &req) {
		return
	}
	if req.CancelJob {
		a.startStop(w, req.TargetDirectory)
		return
	}
	dir, ok := a.savepointDir(w, "savepoint", req.TargetDirectory)
	if !ok {
		return
	}
	o, err := a.ops.start(opSavepoint, false, func(ctx context.Context, o *operation) error {
		p, err := a.ctl.TriggerSavepoint(ctx, dir)
		o.location = p
		return err
	})
	a.accepted(w, o, err)
}

func (a *restAPI) savepointDir(w http.ResponseWriter, what, dir string) (string, bool) {
	if !a.canAct(w, what) {
		return "", false
	}
	d, err := a.ctl.SavepointDir(dir)
	switch {
	case err == nil:
		return d, true
	case conflict(err):
		restError(w, http.StatusConflict, err.Error())
	default:
		restError(w, http.StatusBadRequest, err.Error())
	}
	return "", false
}

func (a *restAPI) stop(w http.ResponseWriter, r *http.Request) {
	var req struct {
		TargetDirectory string `json:"targetDirectory"`
		Drain           bool   `json:"drain"`
	}
	if !readBody(w, r, &req) {
		return
	}
	if req.Drain {
		restError(w, http.StatusBadRequest, "drain (MAX_WATERMARK before the savepoint) is not supported")
		return
	}
	a.startStop(w, req.TargetDirectory)
}

func (a *restAPI) startStop(w http.ResponseWriter, dir string) {
	dir, ok := a.savepointDir(w, "stop with a savepoint", dir)
	if !ok {
		return
	}
	o, err := a.ops.start(opSavepoint, true, func(ctx context.Context, o *operation) error {
		p, err := a.ctl.StopWithSavepoint(ctx, dir)
		o.location = p
		if err == nil {
			a.stopped()
		}
		return err
	})
	a.accepted(w, o, err)
}

func (a *restAPI) triggerCheckpoint(w http.ResponseWriter, r *http.Request) {
	var req struct {
		CheckpointType string `json:"checkpointType"`
	}
	if !readBody(w, r, &req) {
		return
	}
	switch req.CheckpointType {
	case "", "CONFIGURED", "FULL":
	default:
		restError(w, http.StatusBadRequest, fmt.Sprintf("checkpointType %q: weir takes CONFIGURED or FULL checkpoints", req.CheckpointType))
		return
	}
	if !a.canAct(w, "checkpoint") {
		return
	}
	o, err := a.ops.start(opCheckpoint, false, func(ctx context.Context, o *operation) error {
		id, err := a.ctl.TriggerCheckpoint(ctx)
		o.checkpointID = id
		return err
	})
	a.accepted(w, o, err)
}

// failureCause is a failed operation's error, in the place of Flink's
// serialized Java throwable.
type failureCause struct {
	Class      string `json:"class"`
	StackTrace string `json:"stack-trace"`
}

func causeOf(err error) *failureCause {
	inner := err
	for {
		next := errors.Unwrap(inner)
		if next == nil {
			break
		}
		inner = next
	}
	return &failureCause{Class: reflect.TypeOf(inner).String(), StackTrace: err.Error()}
}

type queueStatus struct {
	ID string `json:"id"`
}

func statusOf(o *operation) queueStatus {
	if o.finished() {
		return queueStatus{ID: "COMPLETED"}
	}
	return queueStatus{ID: "IN_PROGRESS"}
}

func (a *restAPI) findOp(w http.ResponseWriter, r *http.Request, kind string) (*operation, bool) {
	id := r.PathValue("triggerid")
	o, ok := a.ops.get(kind, id)
	if !ok {
		restError(w, http.StatusNotFound, fmt.Sprintf("no %s operation %q (the last %d operations are kept)", kind, id, maxOperations))
	}
	return o, ok
}

func (a *restAPI) savepointStatus(w http.ResponseWriter, r *http.Request) {
	o, ok := a.findOp(w, r, opSavepoint)
	if !ok {
		return
	}
	type info struct {
		Location     string        `json:"location,omitempty"`
		FailureCause *failureCause `json:"failure-cause,omitempty"`
	}
	out := struct {
		Status    queueStatus `json:"status"`
		Operation *info       `json:"operation,omitempty"`
	}{Status: statusOf(o)}
	if o.finished() {
		out.Operation = &info{Location: o.location}
		if o.err != nil {
			out.Operation = &info{FailureCause: causeOf(o.err)}
		}
	}
	writeJSON(w, out)
	if o.stop && o.finished() {
		a.read()
	}
}

func (a *restAPI) checkpointStatus(w http.ResponseWriter, r *http.Request) {
	o, ok := a.findOp(w, r, opCheckpoint)
	if !ok {
		return
	}
	type info struct {
		CheckpointID *uint64       `json:"checkpointId,omitempty"`
		FailureCause *failureCause `json:"failureCause,omitempty"`
	}
	out := struct {
		Status    queueStatus `json:"status"`
		Operation *info       `json:"operation,omitempty"`
	}{Status: statusOf(o)}
	if o.finished() {
		id := o.checkpointID
		out.Operation = &info{CheckpointID: &id}
		if o.err != nil {
			out.Operation = &info{FailureCause: causeOf(o.err)}
		}
	}
	writeJSON(w, out)
}

// terminate is PATCH /jobs/{jobid}?mode=cancel.
func (a *restAPI) terminate(w http.ResponseWriter, r *http.Request) {
	switch mode := r.URL.Query().Get("mode"); strings.ToLower(mode) {
	case "", "cancel":
	case "stop":
		restError(w, http.StatusBadRequest, "mode=stop: stop with a savepoint through POST /jobs/{jobid}/stop")
		return
	default:
		restError(w, http.StatusBadRequest, fmt.Sprintf("mode %q: the only mode is cancel", mode))
		return
	}
	switch st := a.ctl.Status().State; {
	case ended(st), st == "canceling":
		restError(w, http.StatusConflict, fmt.Sprintf("cancel: the job is %s", st))
		return
	}
	a.ctl.Cancel()
	a.stopped()
	writeJSONStatus(w, http.StatusAccepted, struct{}{})
}

// restError answers Flink's error body, {"errors": [msg]}.
func restError(w http.ResponseWriter, code int, msg string) {
	body, _ := json.Marshal(map[string][]string{"errors": {msg}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func writeJSONStatus(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		restError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
