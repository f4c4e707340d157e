package weir

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/weirstream/weir/internal/dashboard"
	"github.com/weirstream/weir/internal/jobmaster"
	imetrics "github.com/weirstream/weir/internal/metrics"
	"github.com/weirstream/weir/metrics"
)

// JobMetrics is a snapshot of a running job's metrics (Job.Metrics), with
// Flink's metric names: the job's uptime, restarts and checkpoints, and
// for each operator (vertex) and its subtasks the records and bytes in
// and out with their rates, busy, idle and back-pressured time per
// second, buffer usage, checkpoint alignment, watermarks and late records
// dropped. Its JSON form is the dashboard's API (docs/dashboard.md).
type JobMetrics = metrics.Job

// VertexMetrics are the metrics of one operator of the job graph: a chain
// of the program's operators that runs as one task per subtask.
type VertexMetrics = metrics.Vertex

// SubtaskMetrics are the metrics of one subtask of a vertex.
type SubtaskMetrics = metrics.Task

// CheckpointMetrics are a job's checkpoint counts, the latest
// checkpoint's duration and size, and the checkpoint history.
type CheckpointMetrics = metrics.Checkpoints

// CheckpointRecord is one checkpoint or savepoint of the history.
type CheckpointRecord = metrics.Checkpoint

// JobException is a failure of a job: the cause of its latest restart,
// or of its end.
type JobException = metrics.Exception

// DefaultProgressInterval is how often a job with a logger logs its
// progress line, unless WithProgressInterval says otherwise.
const DefaultProgressInterval = 10 * time.Second

// metricsConfig is an Environment's metrics settings.
type metricsConfig struct {
	name       string
	interval   time.Duration
	progress   time.Duration
	dashboard  *httpConfig
	prometheus *httpConfig
}

type httpConfig struct {
	addr, token  string
	allowedHosts []string
	noGoMetrics  bool
	noPprof      bool
	linger       time.Duration
}

// DefaultLinger is how long the dashboard goes on answering after a stop
// or cancel asked through its REST API ended the job (LingerAfterStop).
const DefaultLinger = 3 * time.Second

func newHTTPConfig(addr string, opts []HTTPOption) *httpConfig {
	h := &httpConfig{addr: addr, linger: DefaultLinger}
	for _, o := range opts {
		o.applyHTTP(h)
	}
	return h
}

func (h *httpConfig) spec() *jobmaster.HTTPSpec {
	return &jobmaster.HTTPSpec{Addr: h.addr, Token: h.token, AllowedHosts: h.allowedHosts, NoGoMetrics: h.noGoMetrics,
		NoPprof: h.noPprof, Linger: h.linger}
}

func defaultMetricsConfig() metricsConfig {
	return metricsConfig{name: "weir", interval: imetrics.DefaultInterval, progress: DefaultProgressInterval}
}

func (m *metricsConfig) validate() error {
	for _, h := range []*httpConfig{m.dashboard, m.prometheus} {
		if h == nil {
			continue
		}
		if _, err := dashboard.LocalAddr(h.addr); err != nil {
			return fmt.Errorf("weir: %w", err)
		}
	}
	return nil
}

// spec returns the metrics settings for the runtime; the progress line
// needs a logger that logs at info level.
func (m *metricsConfig) spec(log *zap.Logger) jobmaster.MetricsSpec {
	s := jobmaster.MetricsSpec{Name: m.name, Interval: m.interval}
	if log.Core().Enabled(zap.InfoLevel) {
		s.Progress = m.progress
	}
	if h := m.dashboard; h != nil {
		s.Dashboard = h.spec()
	}
	if h := m.prometheus; h != nil {
		s.Prometheus = h.spec()
	}
	return s
}

// WithJobName names the job in its metrics (the "job" label), its
// progress line and its dashboard (default "weir").
func WithJobName(name string) Option {
	if name == "" {
		return bad("weir: empty job name")
	}
	return optionFunc(func(c *config) { c.metrics.name = name })
}

// WithMetricsInterval sets how often the job samples its tasks' metrics
// (default 1 s): the rates per second are averages over the last four
// intervals, Job.Metrics is at most this old, and in a job across
// processes every worker reports its tasks' metrics to the coordinator
// this often.
func WithMetricsInterval(d time.Duration) Option {
	if d <= 0 {
		return bad("weir: metrics interval %v must be positive", d)
	}
	return optionFunc(func(c *config) { c.metrics.interval = d })
}

// WithProgressInterval sets how often a job with a logger (WithLogger)
// logs its one-line progress at info level: records per second, the
// back-pressured operators, the latest checkpoint (default 10 s; 0 turns
// it off).
func WithProgressInterval(d time.Duration) Option {
	if d < 0 {
		return bad("weir: progress interval %v must not be negative", d)
	}
	return optionFunc(func(c *config) { c.metrics.progress = d })
}

// HTTPOption configures a server of WithDashboard or WithPrometheus.
type HTTPOption interface{ applyHTTP(*httpConfig) }

type httpOption func(*httpConfig)

func (f httpOption) applyHTTP(c *httpConfig) { f(c) }

// AccessToken makes the server require token from its clients on every
// route but the page and its static files, as "Authorization: Bearer
// TOKEN" or the query parameter token=TOKEN (open the dashboard as
// http://ADDR/#token=TOKEN). Use TLS in front of it on an untrusted
// network. Without a token, the server answers only requests whose Host
// is a loopback name or address or the address it listens on (and
// AllowHosts'), so that a web page cannot reach it through DNS
// rebinding: others get 403.
func AccessToken(token string) HTTPOption {
	return httpOption(func(c *httpConfig) { c.token = token })
}

// AllowHosts adds host names (without port) that a server without a
// token answers to: the machine's name, or a proxy's.
func AllowHosts(hosts ...string) HTTPOption {
	return httpOption(func(c *httpConfig) { c.allowedHosts = append(c.allowedHosts, hosts...) })
}

// WithoutGoMetrics leaves the Go runtime's (go_*) and the process's
// (process_*) metric families out of /metrics, which serves them beside
// weir's by default.
func WithoutGoMetrics() HTTPOption {
	return httpOption(func(c *httpConfig) { c.noGoMetrics = true })
}

// WithoutProfiling turns the dashboard's /debug/pprof/ routes off.
func WithoutProfiling() HTTPOption {
	return httpOption(func(c *httpConfig) { c.noPprof = true })
}

// LingerAfterStop sets how long the dashboard goes on answering once a
// stop or cancel asked through its REST API ended the job, so that the
// caller can poll the outcome (default DefaultLinger; 0: it shuts down
// with the job). Job.Wait returns after it.
func LingerAfterStop(d time.Duration) HTTPOption {
	return httpOption(func(c *httpConfig) { c.linger = max(d, 0) })
}

// WithDashboard serves the job's web dashboard while it runs, on addr
// (host:port; an empty host means 127.0.0.1, so ":8081" serves only this
// machine; port 0 picks a free port, see Job.DashboardAddr): the job
// graph coloured by busy and back-pressured time with records in and out
// per second, the subtasks of a selected operator, the checkpoint history
// and the latest failure, updating live; the same data as JSON under
// /api/v1/ (docs/dashboard.md); Flink's REST API under /jobs/
// (docs/rest.md), which also triggers savepoints and checkpoints, stops
// with a savepoint and cancels, over POST and PATCH only; the Prometheus
// metrics under /metrics; and Go's profiles under /debug/pprof/
// (WithoutProfiling turns them off). It loads nothing from elsewhere,
// and shuts down with the job (LingerAfterStop). Off by default.
func WithDashboard(addr string, opts ...HTTPOption) Option {
	h := newHTTPConfig(addr, opts)
	return optionFunc(func(c *config) { c.metrics.dashboard = h })
}

// WithPrometheus serves the job's metrics in Prometheus' text format
// under /metrics on addr (as WithDashboard: localhost unless a host is
// given), for a Prometheus server to scrape; see Job.PrometheusCollector
// to register them in a registry of your own instead.
func WithPrometheus(addr string, opts ...HTTPOption) Option {
	h := newHTTPConfig(addr, opts)
	return optionFunc(func(c *config) { c.metrics.prometheus = h })
}

// Metrics returns a snapshot of the job's metrics, at most one metrics
// interval old (WithMetricsInterval). After Wait it holds the job's end.
// The snapshot is the caller's.
func (j *Job) Metrics() JobMetrics { return *j.m.Metrics().Clone() }

// PrometheusCollector returns a prometheus.Collector of the job's
// metrics, to register in your own registry: job metrics are named
// weir_job_<Flink name> (weir_job_numRestarts), subtask metrics
// weir_task_<Flink name> (weir_task_numRecordsIn) with the labels job,
// task_id, task and subtask_index, and operator metrics
// weir_operator_<Flink name> with an operator label too. Collecting reads
// the latest snapshot: it never waits for the job.
func (j *Job) PrometheusCollector() prometheus.Collector { return imetrics.NewCollector(j.m.Metrics) }

// DashboardAddr is the address the dashboard listens on ("" without
// WithDashboard).
func (j *Job) DashboardAddr() string { return j.m.DashboardAddr() }

// PrometheusAddr is the address /metrics is served on ("" without
// WithPrometheus).
func (j *Job) PrometheusAddr() string { return j.m.PrometheusAddr() }
