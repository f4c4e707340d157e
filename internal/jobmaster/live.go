package jobmaster

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/weirstream/weir/coordinator"
	"github.com/weirstream/weir/internal/dashboard"
	"github.com/weirstream/weir/internal/deploy"
	"github.com/weirstream/weir/internal/metrics"
	"github.com/weirstream/weir/task"
)

// MetricsSpec configures a job's live metrics.
type MetricsSpec struct {
	// Name names the job in metrics and on the dashboard.
	Name string
	// Interval is how often the job samples its tasks, and how often
	// workers report theirs (0: metrics.DefaultInterval).
	Interval time.Duration
	// Progress is how often the job logs its progress line (0: never).
	Progress time.Duration
	// Dashboard serves the web dashboard, its JSON API and /metrics
	// (nil: off).
	Dashboard *HTTPSpec
	// Prometheus serves /metrics alone (nil: off).
	Prometheus *HTTPSpec
}

// HTTPSpec is where and how one of the job's HTTP servers listens.
type HTTPSpec struct {
	Addr  string // host:port; an empty host means localhost
	Token string // required from clients when set
	// AllowedHosts, NoGoMetrics, NoPprof, MaxProfile and Linger are
	// dashboard.Config's (NoPprof turns /debug/pprof/ off).
	AllowedHosts []string
	NoGoMetrics  bool
	NoPprof      bool
	MaxProfile   time.Duration
	Linger       time.Duration
}

// interval is the sampling interval with its default.
func (m *MetricsSpec) interval() time.Duration {
	if m.Interval > 0 {
		return m.Interval
	}
	return metrics.DefaultInterval
}

// jobStatus is the job's state as its metrics show it. The run loop
// updates it; the sampler reads it (metrics.Source). Safe for concurrent
// use.
type jobStatus struct {
	ck *checkpointing // nil without checkpointing

	mu struct {
		sync.Mutex
		st    metrics.Status
		tasks func() []metrics.TaskSample // of the running attempt; nil: none
		// failures are the latest failures, oldest first, at most
		// maxFailures.
		failures []metrics.Failure
		// stopping is set while a stop with a savepoint is in progress,
		// canceling once the job was asked to end.
		stopping, canceling bool
		// workers lists a cluster job's workers (nil: the job runs in
		// this process); profile records a CPU profile of one.
		workers func() []metrics.Worker
		profile profileFunc
	}
}

// profileFunc records a CPU profile of a worker (dashboard.Control's
// ProfileWorker).
type profileFunc func(ctx context.Context, id string, d time.Duration) ([]byte, error)

// setWorkers sets where a cluster job's workers are listed and profiled.
func (s *jobStatus) setWorkers(f func() []metrics.Worker, profile profileFunc) {
	s.mu.Lock()
	s.mu.workers, s.mu.profile = f, profile
	s.mu.Unlock()
}

// profiler returns how a cluster job's workers are profiled; false for a
// job in this process.
func (s *jobStatus) profiler() (profileFunc, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.profile, s.mu.profile != nil
}

// workers returns a cluster job's workers; false for a job in this
// process.
func (s *jobStatus) workers() ([]metrics.Worker, bool) {
	s.mu.Lock()
	f := s.mu.workers
	s.mu.Unlock()
	if f == nil {
		return nil, false
	}
	return f(), true
}

// maxFailures is how many failures the exception history keeps.
const maxFailures = 32

func newJobStatus(ck *checkpointing) *jobStatus {
	s := &jobStatus{ck: ck}
	s.mu.st.State = "created"
	return s
}

// attemptStarted records that attempt n was deployed, restored from a
// checkpoint or not; tasks reads its tasks' metrics.
func (s *jobStatus) attemptStarted(n int, restored bool, tasks func() []metrics.TaskSample) {
	if s == nil {
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.st.State, s.mu.st.Attempt, s.mu.st.Running = "running", n, now
	if restored {
		s.mu.st.Restored = now
		s.mu.st.Restores++
	}
	s.mu.tasks = tasks
}

// attemptFailed records the failure of the running attempt; the job
// restarts (restarting) or ends.
func (s *jobStatus) attemptFailed(err error, restarting bool) {
	if s == nil || err == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !errors.Is(err, context.Canceled) {
		now := time.Now()
		s.mu.st.Exception = &metrics.Exception{Time: now, Message: err.Error()}
		s.recordLocked(failureOf(err, now, restarting))
	}
	if restarting {
		s.mu.st.State, s.mu.st.Running = "restarting", time.Time{}
	}
}

// restarted counts a restart.
func (s *jobStatus) restarted() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.mu.st.Restarts++
	s.mu.Unlock()
}

// ended records the job's end with the error Wait returns.
func (s *jobStatus) ended(err error, canceled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.st.Running = time.Time{}
	switch {
	case err == nil:
		s.mu.st.State = "finished"
	case canceled:
		s.mu.st.State = "canceled"
	default:
		s.mu.st.State = "failed"
		if s.mu.st.Exception == nil || s.mu.st.Exception.Message != err.Error() {
			now := time.Now()
			s.mu.st.Exception = &metrics.Exception{Time: now, Message: err.Error()}
			s.recordLocked(failureOf(err, now, false))
		}
	}
}

// recordLocked adds f to the exception history.
func (s *jobStatus) recordLocked(f metrics.Failure) {
	if len(s.mu.failures) == maxFailures {
		s.mu.failures = append(s.mu.failures[:0], s.mu.failures[1:]...)
	}
	s.mu.failures = append(s.mu.failures, f)
}

// failures returns the exception history, oldest first.
func (s *jobStatus) failures() []metrics.Failure {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.mu.failures)
}

// setStopping records that a stop with a savepoint is (or no longer is)
// in progress.
func (s *jobStatus) setStopping(on bool) {
	s.mu.Lock()
	s.mu.stopping = on
	s.mu.Unlock()
}

// setCanceling records that the job was asked to end.
func (s *jobStatus) setCanceling() {
	s.mu.Lock()
	s.mu.canceling = true
	s.mu.Unlock()
}

// liveStatus is Status with the stop or cancel in progress: its State
// is "stopping" or "canceling" then, until the job ended.
func (s *jobStatus) liveStatus() metrics.Status {
	st := s.Status()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case st.State == "finished" || st.State == "failed" || st.State == "canceled":
	case s.mu.canceling:
		st.State = "canceling"
	case s.mu.stopping:
		st.State = "stopping"
	}
	return st
}

// failureOf describes err for the exception history: the task and
// operator that failed, if a task did, the chain of errors and the stack
// of a panic.
func failureOf(err error, now time.Time, restarting bool) metrics.Failure {
	f := metrics.Failure{Time: now, Restarting: restarting}
	var te *task.Error
	if errors.As(err, &te) {
		f.Task, f.Operator, f.Location = te.Task, te.Operator, "local"
	}
	var pe *task.PanicError
	if errors.As(err, &pe) {
		f.Stack = string(pe.Stack)
	}
	inner := err
	for e := err; e != nil; e = errors.Unwrap(e) {
		f.Chain = append(f.Chain, e.Error())
		inner = e
	}
	f.Type = reflect.TypeOf(inner).String()
	return f
}

// Tasks implements metrics.Source.
func (s *jobStatus) Tasks() []metrics.TaskSample {
	s.mu.Lock()
	f := s.mu.tasks
	s.mu.Unlock()
	if f == nil {
		return nil
	}
	return f()
}

// Status implements metrics.Source.
func (s *jobStatus) Status() metrics.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.mu.st
	if e := st.Exception; e != nil {
		c := *e
		st.Exception = &c
	}
	return st
}

// Checkpoints implements metrics.Source.
func (s *jobStatus) Checkpoints() (coordinator.Stats, bool) {
	if s.ck == nil {
		return coordinator.Stats{}, false
	}
	return s.ck.coord.Stats(), true
}

// localSamples reads the metrics of attempt n's tasks in d.
func localSamples(d *deploy.Deployment, n int) func() []metrics.TaskSample {
	return func() []metrics.TaskSample {
		ts := d.Tasks()
		out := make([]metrics.TaskSample, len(ts))
		for i, t := range ts {
			out[i] = metrics.TaskSample{LiveMetrics: t.LiveMetrics(), Attempt: n, Location: "local"}
		}
		return out
	}
}

// httpAddrs are the addresses the job's servers listen on.
type httpAddrs struct {
	dashboard, prometheus string
}

// startMetrics creates the job's sampler and binds its servers (they are
// run by Start).
func (j *Job) startMetrics(spec *Spec, start time.Time) error {
	ms := &spec.Metrics
	var observers []func(*metrics.Job)
	if ms.Progress > 0 {
		observers = append(observers, metrics.NewProgress(spec.Logger, ms.Progress).Observe)
	}
	var history *dashboard.History // the dashboard's charts
	if ms.Dashboard != nil {
		history = dashboard.NewHistory(ms.interval())
		observers = append(observers, history.Observe)
	}
	var onSample func(*metrics.Job)
	if len(observers) > 0 {
		onSample = func(j *metrics.Job) {
			for _, o := range observers {
				o(j)
			}
		}
	}
	j.sampler = metrics.NewSampler(metrics.Config{Plan: metrics.PlanOf(ms.Name, spec.Graph), Source: j.status,
		Interval: ms.interval(), Start: start, OnSample: onSample})
	listen := func(h *HTTPSpec, ui bool) (string, error) {
		if h == nil {
			return "", nil
		}
		cfg := dashboard.Config{Addr: h.Addr, Token: h.Token, AllowedHosts: h.AllowedHosts, Latest: j.sampler.Latest, UI: ui,
			NoGoMetrics: h.NoGoMetrics, Refresh: ms.interval(), Logger: spec.Logger}
		if ui {
			cfg.Job = &control{j: j, options: spec.Options}
			cfg.Pprof, cfg.MaxProfile, cfg.Linger = !h.NoPprof, h.MaxProfile, h.Linger
			cfg.History = history
		}
		s, err := dashboard.Listen(cfg)
		if err != nil {
			return "", err
		}
		j.servers = append(j.servers, s)
		spec.Logger.Info("serving metrics", zap.Bool("dashboard", ui), zap.String("addr", s.Addr()))
		return s.Addr(), nil
	}
	var err error
	if j.addrs.dashboard, err = listen(ms.Dashboard, true); err == nil {
		j.addrs.prometheus, err = listen(ms.Prometheus, false)
	}
	if err != nil {
		for _, s := range j.servers {
			s.Close()
		}
		return fmt.Errorf("weir: %w", err)
	}
	return nil
}

// Metrics returns the job's latest metrics snapshot (at most one
// sampling interval old); it must not be modified.
func (j *Job) Metrics() *metrics.Job { return j.sampler.Latest() }

// DashboardAddr is the address the dashboard listens on ("": none).
func (j *Job) DashboardAddr() string { return j.addrs.dashboard }

// PrometheusAddr is the address /metrics is served on ("": none).
func (j *Job) PrometheusAddr() string { return j.addrs.prometheus }
