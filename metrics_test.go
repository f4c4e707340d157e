package weir_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/weirstream/weir"
)

// Names of the slow-sink job's vertices.
const (
	sourceVertex = "numbers -> square"
	sinkVertex   = "slow sink"
)

// startSlowSinkJob starts an unbounded job whose sink is far slower than
// its source: the source's vertex is back-pressured, the sink busy. It
// checkpoints and samples its metrics often, and is canceled at the end
// of the test.
func startSlowSinkJob(t *testing.T, opts ...weir.Option) *weir.Job {
	t.Helper()
	opts = append([]weir.Option{
		weir.WithJobName("slow-sink"),
		weir.WithMetricsInterval(50 * time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 100 * time.Millisecond}),
		// Small buffers: the sink finishes one, and reports, often.
		weir.WithSegmentSize(4096),
	}, opts...)
	env := weir.NewEnvironment(opts...)
	buildSlowSink(env)
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)
	t.Cleanup(func() {
		job.Cancel()
		_, _ = job.Wait()
	})
	return job
}

// buildSlowSink builds numbers -> square -> rebalance -> slow sink.
func buildSlowSink(env *weir.Environment) {
	src := weir.FromGenerator(env, -1, func(i int64) int64 { return i }).Name("numbers")
	sq := weir.Map(src, func(x int64) int64 { return x * x }).Name("square")
	weir.SinkFunc(sq.Rebalance(), func(int64) error {
		// Far slower than the source: about 20 µs a record.
		for end := time.Now().Add(20 * time.Microsecond); time.Now().Before(end); {
		}
		return nil
	}).Name("slow sink")
}

// waitFor polls cond until it holds, for at most jobTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), jobTimeout)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("never: %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func get(t *testing.T, url string, header ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body
}

// scrape reads /metrics and parses it with Prometheus' text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(t, url)
	require.Equal(t, http.StatusOK, code, string(body))
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err)
	return fams
}

// value returns the value of the family's metric whose labels include
// want; ok is false if there is none.
func value(f *dto.MetricFamily, want map[string]string) (float64, bool) {
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func TestPrometheusExpositionOfRunningJob(t *testing.T) {
	job := startSlowSinkJob(t, weir.WithPrometheus("127.0.0.1:0"))
	url := "http://" + job.PrometheusAddr() + "/metrics"
	src := map[string]string{"job": "slow-sink", "task": sourceVertex, "subtask_index": "0"}
	sink := map[string]string{"job": "slow-sink", "task": sinkVertex, "subtask_index": "0"}

	var first map[string]*dto.MetricFamily
	waitFor(t, "records counted", func() bool {
		first = scrape(t, url)
		v, ok := value(first["weir_task_numRecordsIn"], sink)
		return ok && v > 0
	})
	for _, name := range []string{
		"weir_job_uptime", "weir_job_numRestarts", "weir_job_numberOfCompletedCheckpoints",
		"weir_job_numberOfFailedCheckpoints", "weir_job_numberOfAbortedCheckpoints", "weir_job_numberOfInProgressCheckpoints",
		"weir_job_lastCheckpointDuration", "weir_job_lastCheckpointSize", "weir_job_lastCheckpointRestoreTimestamp",
		"weir_task_numRecordsIn", "weir_task_numRecordsOut", "weir_task_numBytesIn", "weir_task_numBytesOut",
		"weir_task_numRecordsInPerSecond", "weir_task_numRecordsOutPerSecond", "weir_task_numBytesInPerSecond",
		"weir_task_numBytesOutPerSecond", "weir_task_busyTimeMsPerSecond", "weir_task_idleTimeMsPerSecond",
		"weir_task_backPressuredTimeMsPerSecond", "weir_task_inPoolUsage", "weir_task_outPoolUsage",
		"weir_task_inputQueueLength", "weir_task_outputQueueLength", "weir_task_checkpointAlignmentTime",
		"weir_task_checkpointStartDelayNanos", "weir_task_currentInputWatermark", "weir_task_currentOutputWatermark",
		"weir_task_numLateRecordsDropped",
	} {
		require.Contains(t, first, name)
	}
	require.Equal(t, dto.MetricType_COUNTER, first["weir_task_numRecordsOut"].GetType())
	require.Equal(t, dto.MetricType_GAUGE, first["weir_task_busyTimeMsPerSecond"].GetType())
	for _, m := range first["weir_task_numRecordsOut"].GetMetric() {
		labels := map[string]bool{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = true
		}
		require.Equal(t, map[string]bool{"job": true, "task_id": true, "task": true, "subtask_index": true}, labels)
	}

	out0, _ := value(first["weir_task_numRecordsOut"], src)
	in0, _ := value(first["weir_task_numRecordsIn"], sink)
	waitFor(t, "the counters grow, the source is back-pressured and checkpoints complete", func() bool {
		f := scrape(t, url)
		out, _ := value(f["weir_task_numRecordsOut"], src)
		in, _ := value(f["weir_task_numRecordsIn"], sink)
		bp, _ := value(f["weir_task_backPressuredTimeMsPerSecond"], src)
		busy, _ := value(f["weir_task_busyTimeMsPerSecond"], sink)
		done, _ := value(f["weir_job_numberOfCompletedCheckpoints"], map[string]string{"job": "slow-sink"})
		return out > out0 && in > in0 && bp > 500 && busy > 500 && done > 0
	})
}

// The collector a user registers in a registry of their own.
func TestPrometheusCollectorInOwnRegistry(t *testing.T) {
	job := startSlowSinkJob(t)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(job.PrometheusCollector()))
	waitFor(t, "the sink's records counted", func() bool {
		return job.Metrics().Vertices[1].Subtasks[0].NumRecordsIn > 0
	})
	n, err := testutil.GatherAndCount(reg, "weir_task_numRecordsIn", "weir_job_numRestarts")
	require.NoError(t, err)
	require.Equal(t, 3, n) // two subtask series and the job's
}

// jobJSON is the part of GET /api/v1/job the tests read.
type jobJSON struct {
	Name        string `json:"name"`
	State       string `json:"state"`
	Refresh     int64  `json:"refresh"`
	NumRestarts int    `json:"numRestarts"`
	Vertices    []struct {
		ID                           string  `json:"id"`
		Name                         string  `json:"name"`
		Parallelism                  int     `json:"parallelism"`
		BackPressure                 string  `json:"backPressure"`
		BusyTimeMsPerSecond          float64 `json:"busyTimeMsPerSecond"`
		BackPressuredTimeMsPerSecond float64 `json:"backPressuredTimeMsPerSecond"`
		Inputs                       []struct {
			ID           string `json:"id"`
			Partitioning string `json:"partitioning"`
		} `json:"inputs"`
		Subtasks []map[string]any `json:"subtasks"`
	} `json:"vertices"`
	Checkpoints *struct {
		NumberOfCompletedCheckpoints int `json:"numberOfCompletedCheckpoints"`
		Summary                      struct {
			Count         int `json:"count"`
			Min, Avg, Max int64
		} `json:"summary"`
		History []map[string]any `json:"history"`
	} `json:"checkpoints"`
}

func TestDashboardJSONAPI(t *testing.T) {
	job := startSlowSinkJob(t, weir.WithDashboard("127.0.0.1:0"))
	base := "http://" + job.DashboardAddr()

	var j jobJSON
	waitFor(t, "back pressure and a completed checkpoint in the API", func() bool {
		code, body := get(t, base+"/api/v1/job")
		require.Equal(t, http.StatusOK, code)
		require.NoError(t, json.Unmarshal(body, &j))
		return len(j.Vertices) == 2 && j.Vertices[0].BackPressure == "high" &&
			j.Checkpoints != nil && j.Checkpoints.NumberOfCompletedCheckpoints > 0
	})
	require.Equal(t, "slow-sink", j.Name)
	require.Equal(t, "running", j.State)
	require.EqualValues(t, 250, j.Refresh) // the metrics interval, at least 250 ms
	src, sink := j.Vertices[0], j.Vertices[1]
	require.Equal(t, sourceVertex, src.Name)
	require.Equal(t, sinkVertex, sink.Name)
	require.Empty(t, src.Inputs)
	require.Len(t, sink.Inputs, 1)
	require.Equal(t, src.ID, sink.Inputs[0].ID)
	require.Equal(t, "rebalance", sink.Inputs[0].Partitioning)
	require.Greater(t, src.BackPressuredTimeMsPerSecond, 500.0)
	for _, name := range []string{"numRecordsIn", "numRecordsOut", "numBytesIn", "numBytesOut", "numRecordsInPerSecond",
		"numRecordsOutPerSecond", "numBytesInPerSecond", "numBytesOutPerSecond", "busyTimeMsPerSecond",
		"idleTimeMsPerSecond", "backPressuredTimeMsPerSecond", "inPoolUsage", "outPoolUsage", "inputQueueLength",
		"outputQueueLength", "checkpointAlignmentTime", "checkpointStartDelayNanos", "currentInputWatermark",
		"currentOutputWatermark", "numLateRecordsDropped"} {
		require.Contains(t, sink.Subtasks[0], name)
	}
	// The three times add up to about a second per second.
	st := src.Subtasks[0]
	sum := st["busyTimeMsPerSecond"].(float64) + st["idleTimeMsPerSecond"].(float64) + st["backPressuredTimeMsPerSecond"].(float64)
	require.InDelta(t, 1000, sum, 1)
	require.Positive(t, st["outPoolUsage"].(float64))

	h := j.Checkpoints.History[0]
	for _, k := range []string{"id", "kind", "status", "acknowledged", "total", "triggerTime", "duration", "size", "alignmentTime"} {
		require.Contains(t, h, k)
	}
	require.Positive(t, j.Checkpoints.Summary.Count)
	require.LessOrEqual(t, j.Checkpoints.Summary.Min, j.Checkpoints.Summary.Max)

	code, body := get(t, base+"/api/v1/vertices/"+sink.ID)
	require.Equal(t, http.StatusOK, code, string(body))
	var v struct {
		Name     string           `json:"name"`
		Subtasks []map[string]any `json:"subtasks"`
	}
	require.NoError(t, json.Unmarshal(body, &v))
	require.Equal(t, sinkVertex, v.Name)
	require.Len(t, v.Subtasks, 1)

	code, body = get(t, base+"/api/v1/checkpoints")
	require.Equal(t, http.StatusOK, code, string(body))
	require.Contains(t, string(body), `"numberOfCompletedCheckpoints"`)

	// The dashboard serves /metrics too.
	fams := scrape(t, base+"/metrics")
	require.Contains(t, fams, "weir_task_busyTimeMsPerSecond")

	// Job.Metrics is the same snapshot for embedding programs.
	m := job.Metrics()
	require.Equal(t, "slow-sink", m.Name)
	require.Len(t, m.Vertices, 2)
	require.NotNil(t, m.Checkpoints)
}

func TestDashboardBadRequests(t *testing.T) {
	job := startSlowSinkJob(t, weir.WithDashboard("127.0.0.1:0"))
	base := "http://" + job.DashboardAddr()
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/api/v1/vertices/nope", http.StatusNotFound},
		{"GET", "/api/v1/nothing", http.StatusNotFound},
		{"GET", "/api/v2/job", http.StatusNotFound},
		{"GET", "/nothing", http.StatusNotFound},
		{"GET", "/static/nothing.js", http.StatusNotFound},
		{"GET", "/static/../../etc/passwd", http.StatusNotFound},
		{"POST", "/api/v1/job", http.StatusMethodNotAllowed},
		{"DELETE", "/api/v1/job", http.StatusMethodNotAllowed},
		{"PUT", "/api/v1/anything", http.StatusMethodNotAllowed},
		{"POST", "/metrics", http.StatusMethodNotAllowed},
		{"GET", "/api/v1/job?x=%zz", http.StatusOK}, // an unparsable query is ignored
	} {
		req, err := http.NewRequestWithContext(t.Context(), c.method, base+c.path, strings.NewReader("{}"))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, "%s %s", c.method, c.path)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, c.code, resp.StatusCode, "%s %s", c.method, c.path)
	}
	// A malformed request line: the server answers 400 and goes on.
	conn, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", job.DashboardAddr())
	require.NoError(t, err)
	_, err = fmt.Fprintf(conn, "GARBAGE\r\n\r\n")
	require.NoError(t, err)
	reply, _ := io.ReadAll(conn)
	conn.Close()
	require.Contains(t, string(reply), "400")
	code, _ := get(t, base+"/api/v1/job")
	require.Equal(t, http.StatusOK, code)
}

func TestDashboardToken(t *testing.T) {
	job := startSlowSinkJob(t, weir.WithDashboard("127.0.0.1:0", weir.AccessToken("s3cret")))
	base := "http://" + job.DashboardAddr()
	for _, path := range []string{"/api/v1/job", "/api/v1/checkpoints", "/metrics"} {
		code, _ := get(t, base+path)
		require.Equal(t, http.StatusUnauthorized, code, path)
		code, _ = get(t, base+path, "Authorization", "Bearer wrong")
		require.Equal(t, http.StatusUnauthorized, code, path)
		code, _ = get(t, base+path+"?token=wrong")
		require.Equal(t, http.StatusUnauthorized, code, path)
		code, _ = get(t, base+path, "Authorization", "Bearer s3cret")
		require.Equal(t, http.StatusOK, code, path)
		code, _ = get(t, base+path+"?token=s3cret")
		require.Equal(t, http.StatusOK, code, path)
	}
	// The page itself holds no data: it asks for the token.
	code, body := get(t, base+"/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), "token-form")
}

// A client that connects and never sends a request, and one that never
// reads its response, do not slow the job, and the job's end closes
// their connections: no goroutine outlives it (goleak in TestMain).
func TestDashboardHungClients(t *testing.T) {
	env := weir.NewEnvironment(weir.WithDashboard("127.0.0.1:0"), weir.WithMetricsInterval(10*time.Millisecond))
	src := weir.FromGenerator(env, -1, func(i int64) int64 { return i }, weir.Rate(20000))
	weir.Discard(src.Rebalance())
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)
	idle, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", job.DashboardAddr())
	require.NoError(t, err)
	defer idle.Close()
	slow, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", job.DashboardAddr())
	require.NoError(t, err)
	defer slow.Close()
	for range 200 { // pipelined requests whose responses nobody reads
		_, err = fmt.Fprintf(slow, "GET /api/v1/job HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
	}
	before := job.Metrics().Vertices[0].Subtasks[0].NumRecordsOut
	waitFor(t, "the job goes on", func() bool { return job.Metrics().Vertices[0].Subtasks[0].NumRecordsOut > before+1000 })
	job.Cancel()
	_, err = job.Wait()
	require.ErrorIs(t, err, context.Canceled)
}

func TestDashboardAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	env := weir.NewEnvironment(weir.WithDashboard(ln.Addr().String()))
	weir.Discard(weir.FromSlice(env, []int64{1, 2, 3}))
	_, err = env.Start(testCtx(t))
	require.ErrorContains(t, err, "address already in use")

	env = weir.NewEnvironment(weir.WithDashboard("no-port"))
	weir.Discard(weir.FromSlice(env, []int64{1}))
	_, err = env.Execute(testCtx(t))
	require.ErrorContains(t, err, "no-port")
}

// A bounded job's metrics after it ended: the final counters.
func TestMetricsAfterJobEnded(t *testing.T) {
	env := weir.NewEnvironment(weir.WithParallelism(2))
	keyedSum(env, 10000)
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)
	res, err := job.Wait()
	require.NoError(t, err)
	m := job.Metrics()
	require.Equal(t, "finished", m.State)
	require.Nil(t, m.Checkpoints)
	var in int64
	for _, v := range m.Vertices {
		in += v.NumRecordsIn
		for _, s := range v.Subtasks {
			require.Equal(t, "finished", s.State)
		}
	}
	require.Equal(t, res.RecordsIn(), in)
}

// Workers report their tasks' metrics to the coordinator while the job
// runs: its snapshot and its Prometheus endpoint show the whole cluster.
func TestClusterMetricsFromWorkers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	opts := []weir.Option{weir.WithParallelism(2), weir.WithJobName("slow-sink"), weir.WithSegmentSize(4096),
		weir.WithMetricsInterval(50 * time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 100 * time.Millisecond, Dir: t.TempDir()})}
	c := &testCluster{t: t, addr: ln.Addr().String(), opts: opts, build: buildSlowSink,
		workers: map[string]context.CancelFunc{}, errs: map[string]error{}}
	cc := weir.ClusterConfig{Listener: ln, Workers: 2, Token: "secret", WorkerTimeout: 20 * time.Second}
	env := weir.NewEnvironment(append(opts, weir.WithCluster(cc), weir.WithPrometheus("127.0.0.1:0"),
		weir.WithDashboard("127.0.0.1:0"))...)
	buildSlowSink(env)
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)
	c.startWorker("w1")
	c.startWorker("w2")

	records := func(m weir.JobMetrics) (n int64) {
		for _, s := range m.Vertices[1].Subtasks {
			n += s.NumRecordsIn
		}
		return n
	}
	waitFor(t, "every subtask reported by its worker", func() bool {
		m := job.Metrics()
		for _, v := range m.Vertices {
			for i, s := range v.Subtasks {
				if s.State != "running" || s.Location != fmt.Sprintf("w%d", i%2+1) {
					return false
				}
			}
		}
		return m.Vertices[1].Subtasks[0].NumRecordsIn > 0 && m.Vertices[1].Subtasks[1].NumRecordsIn > 0
	})
	before := records(job.Metrics())
	waitFor(t, "the workers' counters grow, back pressure shows", func() bool {
		m := job.Metrics()
		return records(m) > before && m.Vertices[0].BackPressure == "high"
	})
	// The coordinator's per-worker view: each worker's address, tasks and
	// Go runtime, as the workers reported them.
	type worker struct {
		ID       string `json:"id"`
		Path     string `json:"path"`
		DataPort int    `json:"dataPort"`
		Reported int64  `json:"timeSinceLastHeartbeat"`
		Tasks    int    `json:"tasks"`
		Runtime  struct {
			HeapBytes  uint64 `json:"heapBytes"`
			Goroutines int    `json:"goroutines"`
			CPUs       int    `json:"cpus"`
			NumGC      uint32 `json:"numGC"`
		} `json:"runtime"`
	}
	var ws []worker
	waitFor(t, "both workers' runtime reports", func() bool {
		code, body := get(t, "http://"+job.DashboardAddr()+"/taskmanagers")
		require.Equal(t, http.StatusOK, code, string(body))
		ws = decode[struct {
			TaskManagers []worker `json:"taskmanagers"`
		}](t, body).TaskManagers
		return len(ws) == 2 && ws[0].Reported > 0 && ws[1].Reported > 0
	})
	for i, w := range ws {
		require.Equal(t, fmt.Sprintf("w%d", i+1), w.ID)
		require.Equal(t, 2, w.Tasks, "subtask %d of both vertices", i)
		require.NotEmpty(t, w.Path)
		require.Positive(t, w.DataPort)
		require.Positive(t, w.Runtime.HeapBytes)
		require.Positive(t, w.Runtime.Goroutines)
		require.Positive(t, w.Runtime.CPUs)
	}
	fams := scrape(t, "http://"+job.PrometheusAddr()+"/metrics")
	for _, sub := range []string{"0", "1"} {
		v, ok := value(fams["weir_task_numRecordsIn"], map[string]string{"task": sinkVertex, "subtask_index": sub})
		require.True(t, ok)
		require.Positive(t, v)
	}
	job.Cancel()
	_, err = job.Wait()
	require.ErrorIs(t, err, context.Canceled)
	c.wg.Wait()
	for id, werr := range c.errs {
		if werr != nil && !errors.Is(werr, context.Canceled) {
			t.Errorf("worker %s: %v", id, werr)
		}
	}
}

// With a logger, the job logs its progress line periodically.
func TestProgressLine(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	startSlowSinkJob(t, weir.WithLogger(zap.New(core)), weir.WithProgressInterval(100*time.Millisecond))
	waitFor(t, "a progress line naming the back-pressured operator and a checkpoint", func() bool {
		for _, e := range logs.FilterMessageSnippet("slow-sink: up ").All() {
			if strings.Contains(e.Message, "back-pressured: numbers -> square") && strings.Contains(e.Message, "last checkpoint") {
				return true
			}
		}
		return false
	})
}

// Without a logger there is no progress line to log, and a disabled one
// logs none.
func TestProgressLineOff(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	env := weir.NewEnvironment(weir.WithLogger(zap.New(core)), weir.WithProgressInterval(0), weir.WithMetricsInterval(time.Millisecond))
	keyedSum(env, 200000)
	_, err := env.Execute(testCtx(t))
	require.NoError(t, err)
	require.Zero(t, logs.FilterMessageSnippet(": up ").Len())
}

// The charts' series: a point a step for every vertex, completed
// checkpoints, and only newer points after ?since=.
func TestDashboardHistory(t *testing.T) {
	job := startSlowSinkJob(t, weir.WithDashboard("127.0.0.1:0"))
	base := "http://" + job.DashboardAddr()
	type history struct {
		Step, Window int64
		Times        []int64
		Vertices     []struct {
			ID, Name                     string
			NumRecordsOutPerSecond       []float64 `json:"numRecordsOutPerSecond"`
			BackPressuredTimeMsPerSecond []float64 `json:"backPressuredTimeMsPerSecond"`
		}
		Checkpoints []struct {
			ID             uint64
			Kind           string
			Time, Duration int64
		}
	}
	var h history
	waitFor(t, "two points and a checkpoint", func() bool {
		code, body := get(t, base+"/api/v1/history")
		require.Equal(t, http.StatusOK, code, string(body))
		h = decode[history](t, body)
		return len(h.Times) >= 2 && len(h.Checkpoints) > 0
	})
	require.Equal(t, int64(1000), h.Step, "a point a second at most")
	require.Equal(t, int64(600000), h.Window)
	require.Len(t, h.Vertices, 2)
	require.Equal(t, sourceVertex, h.Vertices[0].Name)
	for _, v := range h.Vertices {
		require.Len(t, v.NumRecordsOutPerSecond, len(h.Times))
		require.Len(t, v.BackPressuredTimeMsPerSecond, len(h.Times))
	}
	for i := 1; i < len(h.Times); i++ {
		require.Greater(t, h.Times[i], h.Times[i-1])
	}
	require.Equal(t, "checkpoint", h.Checkpoints[0].Kind)
	last := h.Times[len(h.Times)-1]
	code, body := get(t, fmt.Sprintf("%s/api/v1/history?since=%d", base, last))
	require.Equal(t, http.StatusOK, code)
	later := decode[history](t, body)
	for _, x := range later.Times {
		require.Greater(t, x, last)
	}
	for _, c := range later.Checkpoints {
		require.Greater(t, c.Time, last)
	}
	for _, bad := range []string{"x", "-1"} {
		code, body = get(t, base+"/api/v1/history?since="+bad)
		require.Equal(t, http.StatusBadRequest, code)
		require.Contains(t, string(body), "since")
	}
	code, _ = call(t, http.MethodPost, base+"/api/v1/history", "")
	require.Equal(t, http.StatusMethodNotAllowed, code)
	code, body = get(t, base+"/api/v1/job")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), `"charts":true,"profiling":true`)

	// A job in this process: one worker, the process itself.
	code, body = get(t, base+"/taskmanagers")
	require.Equal(t, http.StatusOK, code)
	tms := decode[struct {
		TaskManagers []struct {
			ID       string `json:"id"`
			DataPort int    `json:"dataPort"`
			Tasks    int    `json:"tasks"`
			Runtime  struct {
				HeapBytes  uint64 `json:"heapBytes"`
				Goroutines int    `json:"goroutines"`
			} `json:"runtime"`
		} `json:"taskmanagers"`
	}](t, body).TaskManagers
	require.Len(t, tms, 1)
	require.Equal(t, "local", tms[0].ID)
	require.Equal(t, -1, tms[0].DataPort)
	require.Equal(t, 2, tms[0].Tasks)
	require.Positive(t, tms[0].Runtime.HeapBytes)
	require.Positive(t, tms[0].Runtime.Goroutines)
}

// A flame graph of the job's process over HTTP; bad lengths are refused,
// and without profiling there is none.
func TestDashboardFlameGraph(t *testing.T) {
	job := startSlowSinkJob(t, weir.WithDashboard("127.0.0.1:0"))
	base := "http://" + job.DashboardAddr()
	code, body := get(t, base+"/api/v1/flamegraph?seconds=0.5")
	require.Equal(t, http.StatusOK, code, string(body))
	type node struct {
		Name     string
		Value    int64
		Children []node
	}
	g := decode[struct {
		Seconds float64
		Samples int
		Root    node
	}](t, body)
	require.Equal(t, "root", g.Root.Name)
	require.Positive(t, g.Samples, "the busy sink spins: the profile has samples")
	require.NotEmpty(t, g.Root.Children)
	for _, bad := range []string{"0", "x", "-1", "100000"} {
		code, body = get(t, base+"/api/v1/flamegraph?seconds="+bad)
		require.Equal(t, http.StatusBadRequest, code, bad)
		require.Contains(t, string(body), "seconds")
	}
	other := startSlowSinkJob(t, weir.WithDashboard("127.0.0.1:0", weir.WithoutProfiling()))
	code, _ = get(t, "http://"+other.DashboardAddr()+"/api/v1/flamegraph?seconds=1")
	require.Equal(t, http.StatusNotFound, code)
	code, body = get(t, "http://"+other.DashboardAddr()+"/api/v1/job")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), `"profiling":false`)
}
