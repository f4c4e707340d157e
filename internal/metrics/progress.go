package metrics

import (
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
)

// DefaultProgressInterval is how often a job with a logger logs its
// progress line by default.
const DefaultProgressInterval = 10 * time.Second

// Progress logs a one-line status of a job at most every interval; call
// Observe with every snapshot (Config.OnSample). Not safe for concurrent
// use.
type Progress struct {
	log      *zap.Logger
	interval time.Duration
	last     time.Time
}

// NewProgress returns a progress logger; interval must be positive.
func NewProgress(log *zap.Logger, interval time.Duration) *Progress {
	return &Progress{log: log, interval: interval}
}

// Observe logs j's status line if interval passed since the last one.
func (p *Progress) Observe(j *Job) {
	if j.State != "running" || (!p.last.IsZero() && j.Time.Sub(p.last) < p.interval) {
		return
	}
	if p.last.IsZero() && j.Uptime < p.interval.Milliseconds() {
		return // nothing to say yet
	}
	p.last = j.Time
	p.log.Info(ProgressLine(j))
}

// ProgressLine is j's one-line status: the records per second its
// sources emit and its sinks take in, the back-pressured operators, the
// latest checkpoint and the restarts.
func ProgressLine(j *Job) string {
	var src, sink float64
	var bp []string
	for i := range j.Vertices {
		v := &j.Vertices[i]
		if len(v.Inputs) == 0 {
			src += v.NumRecordsOutPerSecond
		}
		if !feeds(j, v.ID) {
			sink += v.NumRecordsInPerSecond
		}
		if v.BackPressure != "ok" {
			bp = append(bp, fmt.Sprintf("%s (%.0f%%)", v.Name, v.BackPressuredTimeMsPerSecond/10))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: up %s, sources %s records/s, sinks %s records/s", j.Name,
		(time.Duration(j.Uptime) * time.Millisecond).Round(time.Second), human(src), human(sink))
	if len(bp) > 0 {
		fmt.Fprintf(&b, ", back-pressured: %s", strings.Join(bp, ", "))
	} else {
		b.WriteString(", no back pressure")
	}
	if c := j.Checkpoints; c != nil {
		var last *Checkpoint
		for i := range c.History {
			if c.History[i].Status == "completed" {
				last = &c.History[i]
				break
			}
		}
		if last != nil {
			fmt.Fprintf(&b, ", last checkpoint %d %s ago in %dms (%s)", last.ID,
				j.Time.Sub(last.TriggerTime).Round(time.Second), last.Duration, bytes(last.Size))
		} else {
			b.WriteString(", no checkpoint yet")
		}
		if c.NumberOfFailedCheckpoints > 0 {
			fmt.Fprintf(&b, ", %d failed", c.NumberOfFailedCheckpoints)
		}
	}
	if j.NumRestarts > 0 {
		fmt.Fprintf(&b, ", %d restarts", j.NumRestarts)
	}
	return b.String()
}

// feeds reports whether some vertex reads vertex id.
func feeds(j *Job, id string) bool {
	for i := range j.Vertices {
		for _, in := range j.Vertices[i].Inputs {
			if in.ID == id {
				return true
			}
		}
	}
	return false
}

func human(x float64) string {
	switch {
	case x >= 1e6:
		return fmt.Sprintf("%.1fM", x/1e6)
	case x >= 1e4:
		return fmt.Sprintf("%.1fk", x/1e3)
	}
	return fmt.Sprintf("%.0f", x)
}

func bytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
