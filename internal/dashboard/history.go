package dashboard

import (
	"sync"
	"time"

	"github.com/weirstream/weir/internal/metrics"
)

// The charts' span and resolution: the last HistoryWindow of the job at
// most HistoryPoints points per series, so a point every second at least.
const (
	HistoryWindow = 10 * time.Minute
	HistoryPoints = 600
	// maxHistoryCheckpoints bounds the checkpoints kept for the charts
	// (those older than the window are dropped first).
	maxHistoryCheckpoints = 600
)

// History keeps the last HistoryWindow of a job's metrics for the
// dashboard's charts, in rings of fixed size allocated once: per
// operator (vertex) records in and out per second, busy and
// back-pressured time, and every completed checkpoint's duration and
// size. The job feeds it from its sampler (Observe, once per snapshot),
// whether or not anyone watches; the dashboard reads it. Safe for
// concurrent use; memory is bounded by the job's vertices, not by time.
type History struct {
	step time.Duration
	// slack: a sample this much early still makes a point (the
	// sampler's ticks jitter).
	slack time.Duration

	mu sync.Mutex
	// times[i] (unix ms) is point i of every series; next is where the
	// next point goes, n how many are held.
	times    []int64
	next, n  int
	vertices []vertexSeries
	ids      map[string]int // vertex ID → index in vertices
	cks      []ckPoint      // ring of completed checkpoints
	ckNext   int
	ckN      int
	lastCk   uint64 // newest checkpoint recorded
}

// vertexSeries are one vertex's rings, indexed as History.times.
type vertexSeries struct {
	id, name                   string
	in, out, busy, backPressed []float32
}

type ckPoint struct {
	id       uint64
	kind     string
	time     int64 // completion, unix ms
	duration int64 // ms
	size     int64 // bytes
}

// NewHistory returns a history for a job sampled every interval: a
// point every interval, or every HistoryWindow/HistoryPoints if that is
// longer.
func NewHistory(interval time.Duration) *History {
	interval = max(interval, time.Millisecond)
	step := max(interval, HistoryWindow/HistoryPoints)
	// Room for a tenth more points than the window needs: points may come
	// early by the slack.
	n := int(HistoryWindow/step)*11/10 + 1
	return &History{step: step, slack: min(step/10, interval/2), times: make([]int64, n), ids: map[string]int{},
		cks: make([]ckPoint, maxHistoryCheckpoints)}
}

// Step is the time between two points.
func (h *History) Step() time.Duration { return h.step }

// Observe records snapshot j: a point if a step passed since the last
// one, and the checkpoints that completed since the last call. Call it
// from one goroutine, with snapshots in order (the sampler's OnSample).
func (h *History) Observe(j *metrics.Job) {
	now := j.Time.UnixMilli()
	h.mu.Lock()
	defer h.mu.Unlock()
	if ck := j.Checkpoints; ck != nil {
		h.checkpointsLocked(ck.History)
	}
	if h.n > 0 {
		last := h.times[(h.next+len(h.times)-1)%len(h.times)]
		if now-last < (h.step - h.slack).Milliseconds() {
			return
		}
	}
	if j.State != "running" && h.n == 0 {
		return // nothing to chart before the job ran
	}
	i := h.next
	h.times[i] = now
	for k := range j.Vertices {
		v := &j.Vertices[k]
		s := h.seriesLocked(v.ID, v.Name)
		s.in[i], s.out[i] = float32(v.NumRecordsInPerSecond), float32(v.NumRecordsOutPerSecond)
		s.busy[i], s.backPressed[i] = float32(v.BusyTimeMsPerSecond), float32(v.BackPressuredTimeMsPerSecond)
	}
	h.next = (h.next + 1) % len(h.times)
	h.n = min(h.n+1, len(h.times))
}

// seriesLocked returns the series of vertex id, making it (zeros before
// its first point) the first time.
func (h *History) seriesLocked(id, name string) *vertexSeries {
	if k, ok := h.ids[id]; ok {
		return &h.vertices[k]
	}
	n := len(h.times)
	h.ids[id] = len(h.vertices)
	h.vertices = append(h.vertices, vertexSeries{id: id, name: name, in: make([]float32, n), out: make([]float32, n),
		busy: make([]float32, n), backPressed: make([]float32, n)})
	return &h.vertices[len(h.vertices)-1]
}

// checkpointsLocked records the completed checkpoints of history (newest
// first) newer than the last recorded.
func (h *History) checkpointsLocked(history []metrics.Checkpoint) {
	newest := h.lastCk
	for k := len(history) - 1; k >= 0; k-- {
		c := &history[k]
		if c.ID <= h.lastCk || c.Status != "completed" {
			continue
		}
		h.cks[h.ckNext] = ckPoint{id: c.ID, kind: c.Kind, time: c.TriggerTime.UnixMilli() + c.Duration, duration: c.Duration,
			size: c.Size}
		h.ckNext = (h.ckNext + 1) % len(h.cks)
		h.ckN = min(h.ckN+1, len(h.cks))
		newest = max(newest, c.ID)
	}
	h.lastCk = newest
}

// HistoryView is the JSON of GET /api/v1/history: the points after
// Since, oldest first. Every vertex's series has one value per time.
type HistoryView struct {
	// Step and Window are the resolution and span, in ms.
	Step   int64 `json:"step"`
	Window int64 `json:"window"`
	// Times are the points' times, unix ms.
	Times       []int64           `json:"times"`
	Vertices    []VertexHistory   `json:"vertices"`
	Checkpoints []CheckpointPoint `json:"checkpoints"`
}

// VertexHistory is one vertex's series (per second; the times in ms per
// second are the highest among its subtasks, as on the job graph).
type VertexHistory struct {
	ID                           string    `json:"id"`
	Name                         string    `json:"name"`
	NumRecordsInPerSecond        []float32 `json:"numRecordsInPerSecond"`
	NumRecordsOutPerSecond       []float32 `json:"numRecordsOutPerSecond"`
	BusyTimeMsPerSecond          []float32 `json:"busyTimeMsPerSecond"`
	BackPressuredTimeMsPerSecond []float32 `json:"backPressuredTimeMsPerSecond"`
}

// CheckpointPoint is a completed checkpoint or savepoint.
type CheckpointPoint struct {
	ID   uint64 `json:"id"`
	Kind string `json:"kind"`
	// Time is when it completed (unix ms); Duration in ms, Size in bytes.
	Time     int64 `json:"time"`
	Duration int64 `json:"duration"`
	Size     int64 `json:"size"`
}

// Since returns the points and checkpoints later than since (unix ms;
// 0: all) within the window before the latest point.
func (h *History) Since(since int64) HistoryView {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := HistoryView{Step: h.step.Milliseconds(), Window: HistoryWindow.Milliseconds(), Times: []int64{},
		Vertices: make([]VertexHistory, len(h.vertices)), Checkpoints: []CheckpointPoint{}}
	var first int // index of the oldest point returned, counted from the oldest held
	newest := int64(0)
	if h.n > 0 {
		newest = h.times[(h.next+len(h.times)-1)%len(h.times)]
	}
	since = max(since, newest-HistoryWindow.Milliseconds())
	oldest := (h.next - h.n + len(h.times)) % len(h.times)
	for first < h.n && h.times[(oldest+first)%len(h.times)] <= since {
		first++
	}
	for k := first; k < h.n; k++ {
		v.Times = append(v.Times, h.times[(oldest+k)%len(h.times)])
	}
	for x := range h.vertices {
		s := &h.vertices[x]
		vh := VertexHistory{ID: s.id, Name: s.name}
		pick := func(ring []float32) []float32 {
			out := make([]float32, 0, h.n-first)
			for k := first; k < h.n; k++ {
				out = append(out, ring[(oldest+k)%len(h.times)])
			}
			return out
		}
		vh.NumRecordsInPerSecond, vh.NumRecordsOutPerSecond = pick(s.in), pick(s.out)
		vh.BusyTimeMsPerSecond, vh.BackPressuredTimeMsPerSecond = pick(s.busy), pick(s.backPressed)
		v.Vertices[x] = vh
	}
	ckOldest := (h.ckNext - h.ckN + len(h.cks)) % len(h.cks)
	for k := range h.ckN {
		c := h.cks[(ckOldest+k)%len(h.cks)]
		if c.time > since {
			v.Checkpoints = append(v.Checkpoints, CheckpointPoint{ID: c.id, Kind: c.kind, Time: c.time, Duration: c.duration, Size: c.size})
		}
	}
	return v
}
