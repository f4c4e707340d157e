package coordinator

import (
	"maps"
	"time"

	"github.com/weirstream/weir/barrier"
	"github.com/weirstream/weir/state"
)

// TaskCheckpointMetrics is what a task reports about its part of one
// checkpoint, with its acknowledgement.
type TaskCheckpointMetrics struct {
	// AlignmentDuration is how long the task waited for barriers from all
	// its inputs (0 for sources and at-least-once).
	AlignmentDuration time.Duration
	// StartDelay is the time from the checkpoint's trigger to the first
	// barrier reaching the task.
	StartDelay time.Duration
	// SyncDuration and AsyncDuration are the two parts of the snapshot.
	SyncDuration  time.Duration
	AsyncDuration time.Duration
	// StateSize is the bytes the task persisted.
	StateSize int64
	// BytesProcessedDuringAlignment is input processed while aligning.
	BytesProcessedDuringAlignment int64
}

// Status is where a checkpoint stands.
type Status uint8

const (
	InProgress Status = iota
	Completed
	Failed
	// Aborted: the job finished while the checkpoint was pending (not a
	// failure).
	Aborted
)

func (s Status) String() string {
	switch s {
	case InProgress:
		return "in progress"
	case Completed:
		return "completed"
	case Failed:
		return "failed"
	case Aborted:
		return "aborted"
	}
	return "unknown"
}

// TaskStats is one task's acknowledgement of a checkpoint.
type TaskStats struct {
	AckTime time.Time
	TaskCheckpointMetrics
	// Unaligned is whether the task's snapshot holds channel state (its
	// part of the checkpoint went unaligned); PersistedData is that
	// channel state's bytes: the data in flight written into the
	// checkpoint.
	Unaligned     bool
	PersistedData int64
}

// CheckpointStats describes one checkpoint or savepoint.
type CheckpointStats struct {
	ID          barrier.CheckpointID
	Kind        barrier.Kind
	Status      Status
	TriggerTime time.Time
	// Duration is from trigger to completion or failure; for a checkpoint
	// in progress, to the moment Stats was called.
	Duration time.Duration
	// StateSize is the total bytes of the acknowledged task snapshots.
	StateSize    int64
	Acknowledged int // tasks that acknowledged
	Tasks        int // tasks expected to acknowledge
	// Failure is why the checkpoint failed (a *CheckpointError), or nil.
	Failure error
	// SavepointPath is where a completed savepoint was exported.
	SavepointPath string
	// PerTask holds the acknowledgements received so far.
	PerTask map[state.TaskKey]TaskStats
}

// Stats is a snapshot of the coordinator's checkpoint statistics.
type Stats struct {
	InProgress int // checkpoints and savepoints now in progress
	Completed  int // completed since the coordinator was created
	Failed     int // failed since the coordinator was created
	// Aborted counts the checkpoints pending when the job finished,
	// aborted by its end rather than failed (Status Aborted).
	Aborted int
	// History holds the most recent checkpoints, newest first, at most
	// Config.HistorySize.
	History []CheckpointStats
	// LatestCompleted and LatestFailed are the newest of their kind, or nil.
	LatestCompleted *CheckpointStats
	LatestFailed    *CheckpointStats
	// Durations counts every completed checkpoint (not savepoint) by
	// its duration, since the coordinator was created.
	Durations DurationHistogram
}

// DurationBuckets are the upper bounds of DurationHistogram's buckets.
var DurationBuckets = [...]time.Duration{
	5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second,
	2500 * time.Millisecond, 5 * time.Second, 10 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute,
}

// DurationHistogram counts checkpoints by duration.
type DurationHistogram struct {
	// Counts[i] counts the checkpoints that took at most
	// DurationBuckets[i] and longer than the bound before it; the last
	// counts those longer than every bound.
	Counts [len(DurationBuckets) + 1]uint64
	Count  uint64
	Sum    time.Duration
}

func (h *DurationHistogram) observe(d time.Duration) {
	i := 0
	for i < len(DurationBuckets) && d > DurationBuckets[i] {
		i++
	}
	h.Counts[i]++
	h.Count++
	h.Sum += d
}

// statsTracker is part of the pure core: it only records what it is told.
type statsTracker struct {
	size      int
	history   []*CheckpointStats // oldest first
	completed int
	failed    int
	aborted   int
	latestOK  *CheckpointStats
	latestBad *CheckpointStats
	durations DurationHistogram
}

func (s *statsTracker) begin(id barrier.CheckpointID, kind barrier.Kind, tasks int, now time.Time) *CheckpointStats {
	cs := &CheckpointStats{ID: id, Kind: kind, TriggerTime: now, Tasks: tasks, PerTask: make(map[state.TaskKey]TaskStats)}
	s.history = append(s.history, cs)
	if len(s.history) > s.size {
		s.history = append(s.history[:0], s.history[len(s.history)-s.size:]...)
	}
	return cs
}

func (s *statsTracker) ack(cs *CheckpointStats, task state.TaskKey, snap state.TaskSnapshot, m TaskCheckpointMetrics, now time.Time) {
	ts := TaskStats{AckTime: now, TaskCheckpointMetrics: m}
	if ch := snap.Channels; ch != nil {
		ts.Unaligned, ts.PersistedData = true, ch.Size
	}
	cs.PerTask[task] = ts
	cs.Acknowledged++
	cs.StateSize += snap.Size()
}

func (s *statsTracker) complete(cs *CheckpointStats, path string, now time.Time) {
	cs.Status, cs.SavepointPath = Completed, path
	cs.Duration = now.Sub(cs.TriggerTime)
	s.completed++
	s.latestOK = cs
	if cs.Kind == barrier.Checkpoint {
		s.durations.observe(cs.Duration)
	}
}

func (s *statsTracker) fail(cs *CheckpointStats, err error, now time.Time) {
	cs.Status, cs.Failure = Failed, err
	cs.Duration = now.Sub(cs.TriggerTime)
	s.failed++
	s.latestBad = cs
}

// abortedByEnd records cs as aborted by the job's end (err says so).
func (s *statsTracker) abortedByEnd(cs *CheckpointStats, err error, now time.Time) {
	cs.Status, cs.Failure = Aborted, err
	cs.Duration = now.Sub(cs.TriggerTime)
	s.aborted++
}

func copyStats(cs *CheckpointStats, now time.Time) *CheckpointStats {
	if cs == nil {
		return nil
	}
	c := *cs
	c.PerTask = maps.Clone(cs.PerTask)
	if c.Status == InProgress {
		c.Duration = now.Sub(c.TriggerTime)
	}
	return &c
}

func (s *statsTracker) snapshot(inProgress int, now time.Time) Stats {
	st := Stats{
		InProgress:      inProgress,
		Completed:       s.completed,
		Failed:          s.failed,
		Aborted:         s.aborted,
		History:         make([]CheckpointStats, 0, len(s.history)),
		LatestCompleted: copyStats(s.latestOK, now),
		LatestFailed:    copyStats(s.latestBad, now),
		Durations:       s.durations,
	}
	for i := len(s.history) - 1; i >= 0; i-- {
		st.History = append(st.History, *copyStats(s.history[i], now))
	}
	return st
}
