package weir_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/weirstream/weir"
)

// call sends method path with body (none if empty) and header pairs; it
// returns the status and the body.
func call(t *testing.T, method, url, body string, header ...string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

// decode unmarshals body into a fresh T.
func decode[T any](t *testing.T, body []byte) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(body, &v), string(body))
	return v
}

// restJob is a job with a dashboard and its REST API's base URL.
type restJob struct {
	*weir.Job
	base, id string
}

// startRESTJob starts the slow-sink job with a dashboard and reads its
// ID from GET /jobs/overview.
func startRESTJob(t *testing.T, opts ...weir.Option) *restJob {
	t.Helper()
	job := startSlowSinkJob(t, opts...)
	base := "http://" + job.DashboardAddr()
	code, body := get(t, base+"/jobs/overview")
	require.Equal(t, http.StatusOK, code, string(body))
	ov := decode[struct {
		Jobs []struct {
			JID string `json:"jid"`
		} `json:"jobs"`
	}](t, body)
	require.Len(t, ov.Jobs, 1)
	require.Len(t, ov.Jobs[0].JID, 32)
	return &restJob{Job: job, base: base, id: ov.Jobs[0].JID}
}

func (j *restJob) url(path string) string { return j.base + "/jobs/" + j.id + path }

// trigger posts an action and returns its request-id (202 expected).
func (j *restJob) trigger(t *testing.T, path, body string) string {
	t.Helper()
	code, out := call(t, http.MethodPost, j.url(path), body, "Content-Type", "application/json")
	require.Equal(t, http.StatusAccepted, code, string(out))
	id := decode[map[string]string](t, out)["request-id"]
	require.Len(t, id, 32)
	return id
}

// asyncResult is Flink's AsynchronousOperationResult.
type asyncResult struct {
	Status struct {
		ID string `json:"id"`
	} `json:"status"`
	Operation *struct {
		Location     string `json:"location"`
		CheckpointID uint64 `json:"checkpointId"`
		FailureCause *struct {
			Class      string `json:"class"`
			StackTrace string `json:"stack-trace"`
		} `json:"failure-cause"`
		CheckpointFailure *struct {
			StackTrace string `json:"stack-trace"`
		} `json:"failureCause"`
	} `json:"operation"`
}

// await polls an operation's status until it completed.
func (j *restJob) await(t *testing.T, path string) asyncResult {
	t.Helper()
	var r asyncResult
	waitFor(t, "operation "+path+" completes", func() bool {
		code, body := get(t, j.url(path))
		require.Equal(t, http.StatusOK, code, string(body))
		r = decode[asyncResult](t, body)
		require.Contains(t, []string{"IN_PROGRESS", "COMPLETED"}, r.Status.ID)
		return r.Status.ID == "COMPLETED"
	})
	require.NotNil(t, r.Operation)
	return r
}

// The read routes answer Flink's shapes from the running job.
func TestRESTReads(t *testing.T) {
	job := startRESTJob(t, weir.WithDashboard("127.0.0.1:0"))
	waitFor(t, "a completed checkpoint", func() bool {
		ck := job.Metrics().Checkpoints
		return ck != nil && ck.NumberOfCompletedCheckpoints > 0
	})

	code, body := get(t, job.base+"/jobs")
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, fmt.Sprintf(`{"jobs":[{"id":%q,"status":"RUNNING"}]}`, job.id), string(body))

	code, body = get(t, job.base+"/jobs/overview")
	require.Equal(t, http.StatusOK, code)
	ov := decode[struct {
		Jobs []struct {
			Name      string         `json:"name"`
			State     string         `json:"state"`
			StartTime int64          `json:"start-time"`
			EndTime   int64          `json:"end-time"`
			Duration  int64          `json:"duration"`
			Tasks     map[string]int `json:"tasks"`
		} `json:"jobs"`
	}](t, body)
	o := ov.Jobs[0]
	require.Equal(t, "slow-sink", o.Name)
	require.Equal(t, "RUNNING", o.State)
	require.Positive(t, o.StartTime)
	require.EqualValues(t, -1, o.EndTime)
	require.Positive(t, o.Duration)
	require.Equal(t, 2, o.Tasks["total"])
	require.Equal(t, 2, o.Tasks["running"])

	code, body = get(t, job.url(""))
	require.Equal(t, http.StatusOK, code)
	det := decode[struct {
		JID            string `json:"jid"`
		State          string `json:"state"`
		IsStoppable    bool   `json:"isStoppable"`
		MaxParallelism int    `json:"maxParallelism"`
		Vertices       []struct {
			ID             string `json:"id"`
			Name           string `json:"name"`
			Parallelism    int    `json:"parallelism"`
			MaxParallelism int    `json:"maxParallelism"`
			Status         string `json:"status"`
			Metrics        struct {
				WriteRecords  int64 `json:"write-records"`
				Busy          int64 `json:"accumulated-busy-time"`
				BackPressured int64 `json:"accumulated-backpressured-time"`
			} `json:"metrics"`
		} `json:"vertices"`
		Plan struct {
			Nodes []struct {
				ID     string `json:"id"`
				Inputs []struct {
					ID           string `json:"id"`
					ShipStrategy string `json:"ship_strategy"`
				} `json:"inputs"`
			} `json:"nodes"`
		} `json:"plan"`
	}](t, body)
	require.Equal(t, job.id, det.JID)
	require.True(t, det.IsStoppable)
	require.Len(t, det.Vertices, 2)
	src, sink := det.Vertices[0], det.Vertices[1]
	require.Equal(t, sourceVertex, src.Name)
	require.Equal(t, "RUNNING", src.Status)
	require.Positive(t, src.Metrics.WriteRecords)
	require.Equal(t, 128, det.MaxParallelism, "the default number of key groups")
	require.Equal(t, 128, src.MaxParallelism)
	require.Positive(t, src.Metrics.Busy+src.Metrics.BackPressured, "time accumulated since the start")
	require.Positive(t, sink.Metrics.Busy)
	require.Len(t, det.Plan.Nodes, 2)
	require.Equal(t, src.ID, det.Plan.Nodes[1].Inputs[0].ID)
	require.Equal(t, "REBALANCE", det.Plan.Nodes[1].Inputs[0].ShipStrategy)

	code, body = get(t, job.url("/config"))
	require.Equal(t, http.StatusOK, code)
	cfg := decode[struct {
		JID  string `json:"jid"`
		Exec struct {
			Parallelism int               `json:"job-parallelism"`
			User        map[string]string `json:"user-config"`
		} `json:"execution-config"`
	}](t, body)
	require.Equal(t, 1, cfg.Exec.Parallelism)
	require.Equal(t, "100ms", cfg.Exec.User["checkpointing.interval"])
	require.Equal(t, "4096", cfg.Exec.User["segmentSize"])
	require.Equal(t, "50ms", cfg.Exec.User["metrics.interval"])

	code, body = get(t, job.url("/vertices/"+src.ID+"/watermarks"))
	require.Equal(t, http.StatusOK, code)
	wm := decode[[]map[string]string](t, body)
	require.Len(t, wm, 2)
	require.Equal(t, "0.currentInputWatermark", wm[0]["id"])

	code, body = get(t, job.url("/vertices/"+sink.ID))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), `"busyTimeMsPerSecond"`)

	code, body = get(t, job.url("/exceptions"))
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"root-exception":null,"timestamp":null,"all-exceptions":[],"truncated":false,
		"exceptionHistory":{"entries":[],"truncated":false}}`, string(body))

	code, body = get(t, job.url("/checkpoints"))
	require.Equal(t, http.StatusOK, code)
	type task struct {
		NumSubtasks     int `json:"num_subtasks"`
		NumAcknowledged int `json:"num_acknowledged_subtasks"`
		Subtasks        []struct {
			Index        int    `json:"index"`
			Status       string `json:"status"`
			AckTimestamp int64  `json:"ack_timestamp"`
			Checkpoint   *struct {
				Sync, Async int64
			} `json:"checkpoint"`
			Alignment *struct {
				Duration  int64 `json:"duration"`
				Persisted int64 `json:"persisted"`
			} `json:"alignment"`
			StartDelay *int64 `json:"start_delay"`
			StateSize  *int64 `json:"state_size"`
		} `json:"subtasks"`
	}
	type ckStats struct {
		ClassName        string          `json:"className"`
		ID               uint64          `json:"id"`
		Status           string          `json:"status"`
		IsSavepoint      bool            `json:"is_savepoint"`
		CheckpointType   string          `json:"checkpoint_type"`
		TriggerTimestamp int64           `json:"trigger_timestamp"`
		LatestAck        int64           `json:"latest_ack_timestamp"`
		NumSubtasks      int             `json:"num_subtasks"`
		NumAcknowledged  int             `json:"num_acknowledged_subtasks"`
		Tasks            map[string]task `json:"tasks"`
	}
	cks := decode[struct {
		Counts struct {
			Completed, Total int
		} `json:"counts"`
		Summary struct {
			Duration struct{ Min, Max int64 } `json:"end_to_end_duration"`
		} `json:"summary"`
		Latest struct {
			Completed *ckStats `json:"completed"`
		} `json:"latest"`
		History []ckStats `json:"history"`
	}](t, body)
	require.Positive(t, cks.Counts.Completed)
	require.GreaterOrEqual(t, cks.Counts.Total, cks.Counts.Completed)
	require.LessOrEqual(t, cks.Summary.Duration.Min, cks.Summary.Duration.Max)
	done := cks.Latest.Completed
	require.NotNil(t, done)
	require.Equal(t, "completed", done.ClassName)
	require.Equal(t, "COMPLETED", done.Status)
	require.Equal(t, "CHECKPOINT", done.CheckpointType)
	require.Equal(t, 2, done.NumSubtasks)
	require.Equal(t, 2, done.NumAcknowledged)
	require.GreaterOrEqual(t, done.LatestAck, done.TriggerTimestamp)
	require.Len(t, done.Tasks, 2)
	require.Empty(t, done.Tasks[sink.ID].Subtasks) // the list's tasks have no subtasks
	require.NotEmpty(t, cks.History)

	// One checkpoint's details: per vertex, each subtask's figures.
	code, body = get(t, job.url(fmt.Sprintf("/checkpoints/details/%d", done.ID)))
	require.Equal(t, http.StatusOK, code, string(body))
	d := decode[ckStats](t, body)
	require.Equal(t, done.ID, d.ID)
	for _, v := range []string{src.ID, sink.ID} {
		tk := d.Tasks[v]
		require.Equal(t, 1, tk.NumSubtasks)
		require.Equal(t, 1, tk.NumAcknowledged)
		require.Len(t, tk.Subtasks, 1)
		st := tk.Subtasks[0]
		require.Equal(t, "completed", st.Status)
		require.GreaterOrEqual(t, st.AckTimestamp, d.TriggerTimestamp)
		require.NotNil(t, st.Checkpoint)
		require.NotNil(t, st.Alignment)
		require.NotNil(t, st.StartDelay)
		require.NotNil(t, st.StateSize)
	}
	code, body = get(t, job.url(fmt.Sprintf("/checkpoints/details/%d/subtasks/%s", done.ID, sink.ID)))
	require.Equal(t, http.StatusOK, code, string(body))
	sub := decode[task](t, body)
	require.Len(t, sub.Subtasks, 1)
	require.Contains(t, string(body), `"summary"`)

	for _, c := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/jobs/" + strings.Repeat("0", 32), http.StatusNotFound},
		{"GET", "/jobs/" + strings.Repeat("0", 32) + "/checkpoints", http.StatusNotFound},
		{"POST", "/jobs/" + strings.Repeat("0", 32) + "/savepoints", http.StatusNotFound},
		{"GET", "/jobs/" + job.id + "/checkpoints/details/999999", http.StatusNotFound},
		{"GET", "/jobs/" + job.id + "/checkpoints/details/x", http.StatusBadRequest},
		{"GET", "/jobs/" + job.id + "/checkpoints/details/1/subtasks/nope", http.StatusNotFound},
		{"GET", "/jobs/" + job.id + "/vertices/nope/watermarks", http.StatusNotFound},
		{"GET", "/jobs/" + job.id + "/vertices/nope", http.StatusNotFound},
		{"GET", "/jobs/" + job.id + "/exceptions?maxExceptions=x", http.StatusBadRequest},
		{"GET", "/jobs/" + job.id + "/savepoints/" + strings.Repeat("a", 32), http.StatusNotFound},
		{"GET", "/jobs/" + job.id + "/checkpoints/" + strings.Repeat("a", 32), http.StatusNotFound},
		{"GET", "/jobs/" + job.id + "/nothing", http.StatusNotFound},
		{"GET", "/jobs/" + job.id + "/stop", http.StatusMethodNotAllowed},
		{"GET", "/jobs/" + job.id + "/savepoints", http.StatusMethodNotAllowed},
		{"DELETE", "/jobs/" + job.id, http.StatusMethodNotAllowed},
		{"POST", "/jobs/" + job.id, http.StatusMethodNotAllowed},
		{"PUT", "/jobs/overview", http.StatusMethodNotAllowed},
		{"POST", "/jobs/" + job.id + "/exceptions", http.StatusMethodNotAllowed},
	} {
		code, body := call(t, c.method, job.base+c.path, "")
		require.Equal(t, c.code, code, "%s %s: %s", c.method, c.path, body)
		require.Contains(t, string(body), `"error`, "%s %s", c.method, c.path)
	}
	code, _ = call(t, "DELETE", job.url(""), "")
	require.Equal(t, http.StatusMethodNotAllowed, code)
}

// Savepoints and checkpoints through the API, to a given or the default
// directory; bad requests are refused without touching the job.
func TestRESTSavepointsAndCheckpoints(t *testing.T) {
	defDir, dir := t.TempDir(), t.TempDir()
	job := startRESTJob(t, weir.WithDashboard("127.0.0.1:0"),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour, SavepointDir: defDir}))
	waitFor(t, "the job runs", func() bool { return job.Metrics().State == "running" })

	id := job.trigger(t, "/savepoints", fmt.Sprintf(`{"target-directory": %q, "cancel-job": false}`, dir))
	r := job.await(t, "/savepoints/"+id)
	require.Nil(t, r.Operation.FailureCause)
	require.True(t, strings.HasPrefix(r.Operation.Location, dir), r.Operation.Location)
	require.DirExists(t, r.Operation.Location)

	// Without a directory: the configured default.
	id = job.trigger(t, "/savepoints", "")
	r = job.await(t, "/savepoints/"+id)
	require.True(t, strings.HasPrefix(r.Operation.Location, defDir), r.Operation.Location)

	// Two at once: each completes or is refused, none hangs.
	var wg sync.WaitGroup
	var completed atomic.Int32
	for range 2 {
		wg.Go(func() {
			code, out := call(t, http.MethodPost, job.url("/savepoints"), fmt.Sprintf(`{"target-directory": %q}`, dir))
			if code != http.StatusAccepted {
				require.Equal(t, http.StatusConflict, code, string(out))
				return
			}
			r := job.await(t, "/savepoints/"+decode[map[string]string](t, out)["request-id"])
			require.Nil(t, r.Operation.FailureCause)
			require.DirExists(t, r.Operation.Location)
			completed.Add(1)
		})
	}
	wg.Wait()
	require.Positive(t, completed.Load())

	// A checkpoint now, though the interval is an hour.
	id = job.trigger(t, "/checkpoints", `{"checkpointType": "FULL"}`)
	r = job.await(t, "/checkpoints/"+id)
	require.Nil(t, r.Operation.CheckpointFailure)
	require.Positive(t, r.Operation.CheckpointID)
	code, _ := get(t, job.url(fmt.Sprintf("/checkpoints/details/%d", r.Operation.CheckpointID)))
	require.Equal(t, http.StatusOK, code)
	// A savepoint's trigger ID is not a checkpoint's, and the reverse.
	code, _ = get(t, job.url("/savepoints/"+id))
	require.Equal(t, http.StatusNotFound, code)

	for _, c := range []struct{ path, body, want string }{
		{"/savepoints", `{"target-directory": `, "not the expected JSON"},
		{"/savepoints", `{"target-directory": 7}`, "not the expected JSON"},
		{"/savepoints", `[1, 2]`, "not the expected JSON"},
		{"/stop", `{"drain": true}`, "drain"},
		{"/checkpoints", `{"checkpointType": "INCREMENTAL"}`, "INCREMENTAL"},
	} {
		code, out := call(t, http.MethodPost, job.url(c.path), c.body)
		require.Equal(t, http.StatusBadRequest, code, "%s %s: %s", c.path, c.body, out)
		require.Contains(t, string(out), c.want)
	}
	code, out := call(t, http.MethodPost, job.url("/savepoints"), `{"target-directory": "`+strings.Repeat("x", 70<<10)+`"}`)
	require.Equal(t, http.StatusRequestEntityTooLarge, code, string(out))
	require.Equal(t, "running", job.Metrics().State)
}

// A savepoint without a directory and no default is the request's fault.
func TestRESTSavepointNeedsDirectory(t *testing.T) {
	job := startRESTJob(t, weir.WithDashboard("127.0.0.1:0"))
	waitFor(t, "the job runs", func() bool { return job.Metrics().State == "running" })
	code, out := call(t, http.MethodPost, job.url("/savepoints"), `{}`)
	require.Equal(t, http.StatusBadRequest, code, string(out))
	require.Contains(t, string(out), "SavepointDir")
}

// Stop with a savepoint through the API: the job ends cleanly, and the
// dashboard answers until the outcome was read (or the linger ran out);
// no action is taken on the ended job.
func TestRESTStopWithSavepoint(t *testing.T) {
	dir := t.TempDir()
	job := startRESTJob(t, weir.WithDashboard("127.0.0.1:0", weir.LingerAfterStop(time.Minute)))
	waitFor(t, "the job runs", func() bool { return job.Metrics().State == "running" })
	id := job.trigger(t, "/stop", fmt.Sprintf(`{"targetDirectory": %q}`, dir))
	code, out := call(t, http.MethodPost, job.url("/stop"), fmt.Sprintf(`{"targetDirectory": %q}`, dir))
	if code != http.StatusConflict { // the first stop may not have begun yet
		require.Equal(t, http.StatusAccepted, code, string(out))
	}

	waitFor(t, "the job ended", func() bool { return job.Metrics().State == "finished" })
	code, body := get(t, job.url(""))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), `"state":"FINISHED"`)
	for _, a := range []struct{ method, path string }{
		{"POST", "/savepoints"}, {"POST", "/stop"}, {"POST", "/checkpoints"}, {"PATCH", "?mode=cancel"},
	} {
		code, out := call(t, a.method, job.url(a.path), fmt.Sprintf(`{"target-directory": %q}`, dir))
		require.Equal(t, http.StatusConflict, code, "%s %s: %s", a.method, a.path, out)
		require.Contains(t, string(out), "finished")
	}
	r := job.await(t, "/savepoints/"+id)
	require.Nil(t, r.Operation.FailureCause)
	require.DirExists(t, r.Operation.Location)
	start := time.Now()
	_, err := job.Wait() // the outcome was read: the linger ends
	require.NoError(t, err)
	require.Less(t, time.Since(start), 30*time.Second)
}

// Cancel through the API: 202, the job ends canceled, a second cancel is
// a conflict; a bad mode is refused.
func TestRESTCancel(t *testing.T) {
	job := startRESTJob(t, weir.WithDashboard("127.0.0.1:0", weir.LingerAfterStop(100*time.Millisecond)))
	waitFor(t, "the job runs", func() bool { return job.Metrics().State == "running" })
	code, out := call(t, http.MethodPatch, job.url("?mode=nope"), "")
	require.Equal(t, http.StatusBadRequest, code, string(out))
	code, out = call(t, http.MethodPatch, job.url("?mode=stop"), "")
	require.Equal(t, http.StatusBadRequest, code, string(out))
	code, out = call(t, http.MethodPatch, job.url("?mode=cancel"), "")
	require.Equal(t, http.StatusAccepted, code, string(out))
	code, out = call(t, http.MethodPatch, job.url("?mode=cancel"), "")
	require.Equal(t, http.StatusConflict, code, string(out))
	code, out = call(t, http.MethodPost, job.url("/savepoints"), `{"target-directory": "/tmp"}`)
	require.Equal(t, http.StatusConflict, code, string(out))
	_, err := job.Wait()
	require.ErrorIs(t, err, context.Canceled)
}

// While the job restarts, actions are refused with 409 at once; the
// exception history has the failure with its panic's stack.
func TestRESTActionsWhileRestarting(t *testing.T) {
	var failed atomic.Bool
	env := weir.NewEnvironment(weir.WithDashboard("127.0.0.1:0"), weir.WithMetricsInterval(20*time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}),
		weir.WithRestartStrategy(weir.FixedDelayRestart(1, time.Hour)))
	src := weir.FromGenerator(env, -1, func(i int64) int64 { return i }, weir.Rate(1000))
	weir.SinkFunc(weir.Map(src, func(x int64) int64 {
		if x == 5 && !failed.Swap(true) {
			panic("boom at five")
		}
		return x
	}).Name("fragile"), func(int64) error { return nil }).Name("sink")
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	defer func() {
		j.Cancel()
		_, _ = j.Wait()
	}()
	job := &restJob{Job: j, base: "http://" + j.DashboardAddr()}
	code, body := get(t, job.base+"/jobs/overview")
	require.Equal(t, http.StatusOK, code)
	job.id = decode[struct {
		Jobs []struct {
			JID string `json:"jid"`
		} `json:"jobs"`
	}](t, body).Jobs[0].JID
	waitFor(t, "the job restarting", func() bool { return j.Metrics().State == "restarting" })

	for _, a := range []struct{ method, path string }{
		{"POST", "/savepoints"}, {"POST", "/stop"}, {"POST", "/checkpoints"},
	} {
		code, out := call(t, a.method, job.url(a.path), `{"target-directory": "/tmp", "targetDirectory": "/tmp"}`)
		require.Equal(t, http.StatusConflict, code, "%s %s: %s", a.method, a.path, out)
		require.Contains(t, string(out), "restarting")
	}
	code, body = get(t, job.url(""))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), `"state":"RESTARTING"`)

	code, body = get(t, job.url("/exceptions"))
	require.Equal(t, http.StatusOK, code)
	ex := decode[struct {
		Root    *string `json:"root-exception"`
		History struct {
			Entries []struct {
				Name       string   `json:"exceptionName"`
				Stacktrace string   `json:"stacktrace"`
				Timestamp  int64    `json:"timestamp"`
				Task       string   `json:"taskName"`
				Operator   string   `json:"operator"`
				Endpoint   string   `json:"endpoint"`
				Chain      []string `json:"chain"`
				Stack      string   `json:"stack"`
				Restarting bool     `json:"restarting"`
			} `json:"entries"`
		} `json:"exceptionHistory"`
	}](t, body)
	require.NotNil(t, ex.Root)
	require.Len(t, ex.History.Entries, 1)
	e := ex.History.Entries[0]
	require.Equal(t, "*task.PanicError", e.Name)
	require.Contains(t, e.Task, "fragile")
	require.Equal(t, "fragile", e.Operator)
	require.Equal(t, "local", e.Endpoint)
	require.True(t, e.Restarting)
	require.Positive(t, e.Timestamp)
	require.Contains(t, e.Chain[len(e.Chain)-1], "boom at five")
	require.Contains(t, e.Stack, "rest_test.go") // the panicking function's frame
	require.Contains(t, e.Stacktrace, "Caused by: ")
	code, body = get(t, job.url("/exceptions?maxExceptions=0"))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), `"entries":[],"truncated":true`)

	// Cancel is still taken: the job ends.
	code, out := call(t, http.MethodPatch, job.url("?mode=cancel"), "")
	require.Equal(t, http.StatusAccepted, code, string(out))
	_, err = j.Wait()
	require.Error(t, err)
}

// A job without checkpointing has no checkpoints to show or take.
func TestRESTWithoutCheckpointing(t *testing.T) {
	env := weir.NewEnvironment(weir.WithDashboard("127.0.0.1:0"), weir.WithMetricsInterval(20*time.Millisecond))
	weir.Discard(weir.FromGenerator(env, -1, func(i int64) int64 { return i }, weir.Rate(1000)))
	j, err := env.Start(testCtx(t))
	require.NoError(t, err)
	defer func() {
		j.Cancel()
		_, _ = j.Wait()
	}()
	base := "http://" + j.DashboardAddr()
	_, body := get(t, base+"/jobs")
	id := decode[struct {
		Jobs []struct{ ID string } `json:"jobs"`
	}](t, body).Jobs[0].ID
	waitFor(t, "the job runs", func() bool { return j.Metrics().State == "running" })
	code, _ := get(t, base+"/jobs/"+id+"/checkpoints")
	require.Equal(t, http.StatusNotFound, code)
	for _, p := range []string{"/savepoints", "/stop", "/checkpoints"} {
		code, out := call(t, http.MethodPost, base+"/jobs/"+id+p, `{"target-directory": "/tmp"}`)
		require.Equal(t, http.StatusConflict, code, "%s: %s", p, out)
		require.Contains(t, string(out), "does not checkpoint")
	}
}

// Every route needs the token when one is set: the API, the actions,
// pprof and /metrics; only the page and its static files do not.
func TestDashboardTokenOnEveryRoute(t *testing.T) {
	dir := t.TempDir()
	job := startSlowSinkJob(t, weir.WithDashboard("127.0.0.1:0", weir.AccessToken("s3cret")))
	base := "http://" + job.DashboardAddr()
	code, body := get(t, base+"/jobs/overview", "Authorization", "Bearer s3cret")
	require.Equal(t, http.StatusOK, code)
	id := decode[struct {
		Jobs []struct {
			JID string `json:"jid"`
		} `json:"jobs"`
	}](t, body).Jobs[0].JID
	routes := []struct{ method, path string }{
		{"GET", "/api/v1/job"}, {"GET", "/metrics"}, {"GET", "/jobs"}, {"GET", "/jobs/overview"},
		{"GET", "/jobs/" + id}, {"GET", "/jobs/" + id + "/config"}, {"GET", "/jobs/" + id + "/checkpoints"},
		{"GET", "/jobs/" + id + "/exceptions"}, {"POST", "/jobs/" + id + "/savepoints"},
		{"POST", "/jobs/" + id + "/stop"}, {"POST", "/jobs/" + id + "/checkpoints"}, {"PATCH", "/jobs/" + id + "?mode=cancel"},
		{"GET", "/debug/pprof/"}, {"GET", "/debug/pprof/heap"}, {"GET", "/debug/pprof/profile?seconds=1"},
		{"GET", "/debug/pprof/cmdline"}, {"GET", "/nothing"}, {"DELETE", "/jobs/" + id},
		{"GET", "/api/v1/history"}, {"GET", "/api/v1/flamegraph?seconds=1"}, {"GET", "/taskmanagers"},
		{"GET", "/taskmanagers/local/flamegraph?seconds=1"}, {"GET", "/taskmanagers/local/pprof/profile?seconds=1"},
	}
	for _, r := range routes {
		for _, h := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "s3cret"}} {
			code, _ := call(t, r.method, base+r.path, fmt.Sprintf(`{"target-directory": %q}`, dir), h...)
			require.Equal(t, http.StatusUnauthorized, code, "%s %s %v", r.method, r.path, h)
		}
		sep := "?"
		if strings.Contains(r.path, "?") {
			sep = "&"
		}
		code, _ := call(t, r.method, base+r.path+sep+"token=wrong", "")
		require.Equal(t, http.StatusUnauthorized, code, "%s %s", r.method, r.path)
	}
	// No refused action stopped or canceled the job (it may still be
	// starting its tasks on a loaded machine).
	require.Contains(t, []string{"created", "running"}, job.Metrics().State)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries) // no savepoint was taken
	code, _ = get(t, base+"/")
	require.Equal(t, http.StatusOK, code)
	code, _ = get(t, base+"/static/app.js")
	require.Equal(t, http.StatusOK, code)
	code, _ = get(t, base+"/debug/pprof/", "Authorization", "Bearer s3cret")
	require.Equal(t, http.StatusOK, code)
	// With the token any Host is answered: the token, not the name, guards it.
	code, _ = call(t, "GET", base+"/jobs", "", "Authorization", "Bearer s3cret", "Host", "evil.example.com")
	require.Equal(t, http.StatusOK, code)
}

// Without a token, a request for another host is refused (DNS rebinding),
// and a browser's cross-origin action is refused (CSRF).
func TestDashboardHostAndOriginChecks(t *testing.T) {
	dir := t.TempDir()
	job := startSlowSinkJob(t, weir.WithDashboard("127.0.0.1:0", weir.AllowHosts("weir.internal")),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: time.Hour}))
	base := "http://" + job.DashboardAddr()
	_, port, err := net.SplitHostPort(job.DashboardAddr())
	require.NoError(t, err)
	for _, p := range []string{"/api/v1/job", "/jobs/overview", "/metrics", "/debug/pprof/", "/", "/static/app.js"} {
		code, body := call(t, "GET", base+p, "", "Host", "evil.example.com:"+port)
		require.Equal(t, http.StatusForbidden, code, p)
		require.Contains(t, string(body), "evil.example.com")
		code, _ = call(t, "GET", base+p, "", "Host", "evil.example.com")
		require.Equal(t, http.StatusForbidden, code, p)
		for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "localhost", "[::1]:" + port,
			"app.localhost:" + port, "weir.internal:" + port, "WEIR.internal"} {
			code, _ := call(t, "GET", base+p, "", "Host", host)
			require.Equal(t, http.StatusOK, code, "%s %s", p, host)
		}
	}
	_, body := get(t, base+"/jobs")
	id := decode[struct {
		Jobs []struct{ ID string } `json:"jobs"`
	}](t, body).Jobs[0].ID
	waitFor(t, "the job runs", func() bool { return job.Metrics().State == "running" })
	sp := fmt.Sprintf(`{"target-directory": %q}`, dir)
	for _, h := range [][]string{
		{"Sec-Fetch-Site", "cross-site"},
		{"Origin", "http://evil.example.com"},
		{"Sec-Fetch-Site", "same-site", "Origin", "http://other.localhost:" + port},
	} {
		code, _ := call(t, http.MethodPost, base+"/jobs/"+id+"/savepoints", sp, h...)
		require.Equal(t, http.StatusForbidden, code, "%v", h)
		code, _ = call(t, http.MethodPatch, base+"/jobs/"+id+"?mode=cancel", "", h...)
		require.Equal(t, http.StatusForbidden, code, "%v", h)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
	require.Equal(t, "running", job.Metrics().State)
	// The page's own requests (same origin) and non-browser clients act.
	code, out := call(t, http.MethodPost, base+"/jobs/"+id+"/savepoints", sp, "Sec-Fetch-Site", "same-origin",
		"Origin", base)
	require.Equal(t, http.StatusAccepted, code, string(out))
	code, out = call(t, http.MethodPost, base+"/jobs/"+id+"/checkpoints", "")
	require.Equal(t, http.StatusAccepted, code, string(out))
}

// Hung and slow clients of the new routes do not slow the job: pipelined
// requests nobody reads, an action whose body never arrives, a CPU
// profile whose client went away. The job's end closes them all.
func TestRESTHungClients(t *testing.T) {
	env := weir.NewEnvironment(weir.WithDashboard("127.0.0.1:0"), weir.WithMetricsInterval(10*time.Millisecond),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 50 * time.Millisecond}))
	src := weir.FromGenerator(env, -1, func(i int64) int64 { return i }, weir.Rate(20000))
	weir.Discard(src.Rebalance())
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)
	base := "http://" + job.DashboardAddr()
	_, body := get(t, base+"/jobs")
	id := decode[struct {
		Jobs []struct{ ID string } `json:"jobs"`
	}](t, body).Jobs[0].ID
	vid := job.Metrics().Vertices[0].ID
	dial := func() net.Conn {
		c, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", job.DashboardAddr())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	slow := dial()
	for range 50 {
		for _, p := range []string{"/jobs/overview", "/jobs/" + id, "/jobs/" + id + "/checkpoints", "/jobs/" + id + "/exceptions",
			"/debug/pprof/goroutine?debug=1", "/api/v1/history", "/taskmanagers", "/jobs/" + id + "/vertices/" + vid + "/watermarks"} {
			_, err = fmt.Fprintf(slow, "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", p)
			require.NoError(t, err)
		}
	}
	// An action whose body never comes.
	_, err = fmt.Fprintf(dial(), "POST /jobs/%s/savepoints HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n{\"targ", id)
	require.NoError(t, err)
	// A profile and flame graphs nobody waits for.
	_, err = fmt.Fprintf(dial(), "GET /debug/pprof/profile?seconds=60 HTTP/1.1\r\nHost: localhost\r\n\r\n")
	require.NoError(t, err)
	_, err = fmt.Fprintf(dial(), "GET /api/v1/flamegraph?seconds=60 HTTP/1.1\r\nHost: localhost\r\n\r\n")
	require.NoError(t, err)
	_, err = fmt.Fprintf(dial(), "GET /taskmanagers/local/flamegraph?seconds=60 HTTP/1.1\r\nHost: localhost\r\n\r\n")
	require.NoError(t, err)
	before := job.Metrics().Vertices[0].Subtasks[0].NumRecordsOut
	ck := job.Metrics().Checkpoints.NumberOfCompletedCheckpoints
	waitFor(t, "the job goes on", func() bool {
		m := job.Metrics()
		return m.Vertices[0].Subtasks[0].NumRecordsOut > before+1000 && m.Checkpoints.NumberOfCompletedCheckpoints > ck+2
	})
	job.Cancel()
	_, err = job.Wait()
	require.ErrorIs(t, err, context.Canceled)
}

// /debug/pprof/: the index, named profiles, a CPU profile of N seconds
// (one at a time), bad lengths refused.
func TestDashboardPprof(t *testing.T) {
	job := startSlowSinkJob(t, weir.WithDashboard("127.0.0.1:0"))
	base := "http://" + job.DashboardAddr()
	code, body := get(t, base+"/debug/pprof/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), "goroutine")
	code, body = get(t, base+"/debug/pprof/goroutine?debug=1")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), "goroutine profile:")
	code, body = get(t, base+"/debug/pprof/heap?gc=1")
	require.Equal(t, http.StatusOK, code)
	require.True(t, bytes.HasPrefix(body, []byte{0x1f, 0x8b}), "a gzipped profile") // pprof's format
	code, _ = get(t, base+"/debug/pprof/nothing")
	require.Equal(t, http.StatusNotFound, code)
	code, _ = get(t, base+"/debug/pprof/cmdline")
	require.Equal(t, http.StatusOK, code)

	// Two CPU profiles at once: the second is refused.
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	var prof []byte
	var mu sync.Mutex
	for i := range 2 {
		wg.Go(func() {
			if i == 1 {
				time.Sleep(100 * time.Millisecond)
			}
			code, body := get(t, base+"/debug/pprof/profile?seconds=0.5")
			codes <- code
			if code == http.StatusOK {
				mu.Lock()
				prof = body
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(codes)
	var got []int
	for c := range codes {
		got = append(got, c)
	}
	require.ElementsMatch(t, []int{http.StatusOK, http.StatusConflict}, got)
	require.True(t, bytes.HasPrefix(prof, []byte{0x1f, 0x8b}), "a gzipped CPU profile")
	require.NoError(t, os.WriteFile(filepath.Join(t.TempDir(), "cpu.pprof"), prof, 0o600))

	for _, q := range []string{"seconds=x", "seconds=-1", "seconds=0", "seconds=100000"} {
		code, _ := get(t, base+"/debug/pprof/profile?"+q)
		require.Equal(t, http.StatusBadRequest, code, q)
	}
	code, _ = get(t, base+"/debug/pprof/trace?seconds=0.1")
	require.Equal(t, http.StatusOK, code)
	// A job in one process profiles itself as its only worker, "local".
	code, body = get(t, base+"/taskmanagers/local/pprof/profile?seconds=0.2")
	require.Equal(t, http.StatusOK, code, string(body))
	_, err := profile.ParseData(body)
	require.NoError(t, err)
	code, _ = get(t, base+"/taskmanagers/w1/flamegraph?seconds=1")
	require.Equal(t, http.StatusNotFound, code)

	// /metrics has Go's and the process's families and the checkpoint
	// duration histogram beside weir's.
	waitFor(t, "a completed checkpoint", func() bool { return job.Metrics().Checkpoints.NumberOfCompletedCheckpoints > 0 })
	fams := scrape(t, base+"/metrics")
	for _, f := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total",
		"weir_job_checkpoint_duration_seconds", "weir_task_numRecordsIn"} {
		require.Contains(t, fams, f)
	}
	require.Positive(t, fams["weir_job_checkpoint_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleCount())

	// Off with WithoutProfiling and WithoutGoMetrics.
	off := startSlowSinkJob(t, weir.WithDashboard("127.0.0.1:0", weir.WithoutProfiling(), weir.WithoutGoMetrics()))
	code, _ = get(t, "http://"+off.DashboardAddr()+"/debug/pprof/")
	require.Equal(t, http.StatusNotFound, code)
	// Subtasks without metrics yet are left out of /metrics.
	waitFor(t, "the subtasks' metrics", func() bool {
		for _, v := range off.Metrics().Vertices {
			for _, st := range v.Subtasks {
				if st.State == "unknown" {
					return false
				}
			}
		}
		return true
	})
	fams = scrape(t, "http://"+off.DashboardAddr()+"/metrics")
	require.NotContains(t, fams, "go_goroutines")
	require.NotContains(t, fams, "process_cpu_seconds_total")
	require.Contains(t, fams, "weir_task_numRecordsIn")
}

// A worker's CPU profile, asked over its control connection: raw and as
// a flame graph, recorded by the worker asked (its log says so); an
// unknown worker, a bad length, a second profile of the same worker, a
// client that went away (the worker stops and records again) and a
// worker lost mid-profile each get their answer.
func TestRESTWorkerProfile(t *testing.T) {
	job, c, logs := startClusterDashboard(t)
	base := "http://" + job.DashboardAddr()
	recorded := func(worker string) int { return profilesRecorded(logs, worker) }

	// pprof's format, from w1.
	code, body := get(t, base+"/taskmanagers/w1/pprof/profile?seconds=1")
	require.Equal(t, http.StatusOK, code, string(body))
	prof, err := profile.ParseData(body)
	require.NoError(t, err)
	// pprof dates the profile from its writer goroutine's start, a
	// little after recording began: near the second asked, not at least it.
	require.InDelta(t, float64(time.Second), float64(prof.DurationNanos), float64(300*time.Millisecond))
	require.NotEmpty(t, prof.Sample, "the sink spins: CPU samples")
	require.Equal(t, 1, recorded("w1"))
	require.Zero(t, recorded("w2"))

	// A flame graph, from w2.
	code, body = get(t, base+"/taskmanagers/w2/flamegraph?seconds=1")
	require.Equal(t, http.StatusOK, code, string(body))
	g := decode[struct {
		Seconds float64
		Samples int
		Root    struct {
			Name  string
			Value int64
		}
	}](t, body)
	require.InDelta(t, 1, g.Seconds, 0.5)
	require.Positive(t, g.Samples)
	require.Equal(t, "root", g.Root.Name)
	require.Positive(t, g.Root.Value)
	require.Equal(t, 1, recorded("w2"))

	// Refused before anything is recorded.
	for path, want := range map[string]int{
		"/taskmanagers/w9/flamegraph?seconds=1":        http.StatusNotFound,
		"/taskmanagers/local/pprof/profile?seconds=1":  http.StatusNotFound,
		"/taskmanagers/w1/flamegraph?seconds=61":       http.StatusBadRequest,
		"/taskmanagers/w1/flamegraph?seconds=0":        http.StatusBadRequest,
		"/taskmanagers/w1/pprof/profile?seconds=three": http.StatusBadRequest,
	} {
		code, body := get(t, base+path)
		require.Equal(t, want, code, "%s: %s", path, body)
		require.Len(t, decode[map[string][]string](t, body)["errors"], 1, "Flink's error body")
	}

	// A second profile of the same worker while one runs: 409.
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/taskmanagers/w1/flamegraph?seconds=3", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	waitFor(t, "w1 records", func() bool { return len(logs.FilterMessage("recording a CPU profile").All()) == 3 })
	code, body = get(t, base+"/taskmanagers/w1/flamegraph?seconds=1")
	require.Equal(t, http.StatusConflict, code, string(body))
	require.Contains(t, string(body), "on worker w1")
	require.Equal(t, http.StatusOK, <-first)

	// A client that goes away: the worker stops, and records again.
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/taskmanagers/w2/pprof/profile?seconds=30", nil)
	require.NoError(t, err)
	time.AfterFunc(300*time.Millisecond, cancel)
	_, err = http.DefaultClient.Do(req)
	require.ErrorIs(t, err, context.Canceled)
	waitFor(t, "w2 records again", func() bool {
		code, _ := get(t, base+"/taskmanagers/w2/pprof/profile?seconds=1")
		return code == http.StatusOK
	})
	require.Equal(t, 2, recorded("w2"), "the canceled profile was not sent")

	// A worker lost mid-profile: 502, saying so.
	lost := make(chan struct {
		code int
		body []byte
	}, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/taskmanagers/w2/flamegraph?seconds=30", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			lost <- struct {
				code int
				body []byte
			}{}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		lost <- struct {
			code int
			body []byte
		}{resp.StatusCode, b}
	}()
	n := len(logs.FilterMessage("recording a CPU profile").All())
	waitFor(t, "w2 records", func() bool { return len(logs.FilterMessage("recording a CPU profile").All()) > n })
	c.kill("w2")
	r := <-lost
	require.Equal(t, http.StatusBadGateway, r.code, string(r.body))
	require.Contains(t, string(r.body), "worker w2 was lost during its CPU profile")

	// The loss fails the job (no restart strategy) unless the cancel
	// comes first.
	job.Cancel()
	_, err = job.Wait()
	require.Error(t, err)
	c.wg.Wait()
	for id, werr := range c.errs {
		if werr != nil && !errors.Is(werr, context.Canceled) {
			t.Errorf("worker %s: %v", id, werr)
		}
	}
}

// startClusterDashboard starts the slow-sink job on a coordinator with a
// dashboard and two workers, w1 and w2, in this process, logging to the
// observer it returns; it returns once /taskmanagers lists both.
func startClusterDashboard(t *testing.T) (*weir.Job, *testCluster, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	opts := []weir.Option{weir.WithParallelism(2), weir.WithJobName("slow-sink"), weir.WithSegmentSize(4096),
		weir.WithMetricsInterval(50 * time.Millisecond), weir.WithLogger(zap.New(core)),
		weir.WithCheckpointing(weir.CheckpointConfig{Interval: 100 * time.Millisecond, Dir: t.TempDir()})}
	c := &testCluster{t: t, addr: ln.Addr().String(), opts: opts, build: buildSlowSink,
		workers: map[string]context.CancelFunc{}, errs: map[string]error{}}
	cc := weir.ClusterConfig{Listener: ln, Workers: 2, Token: "secret", WorkerTimeout: 20 * time.Second}
	env := weir.NewEnvironment(append(opts, weir.WithCluster(cc), weir.WithDashboard("127.0.0.1:0"))...)
	buildSlowSink(env)
	job, err := env.Start(testCtx(t))
	require.NoError(t, err)
	c.startWorker("w1")
	c.startWorker("w2")
	waitFor(t, "both workers listed", func() bool {
		_, body := get(t, "http://"+job.DashboardAddr()+"/taskmanagers")
		return len(decode[struct {
			TaskManagers []struct{ ID string } `json:"taskmanagers"`
		}](t, body).TaskManagers) == 2
	})
	return job, c, logs
}

// profilesRecorded counts the CPU profiles worker recorded and sent.
func profilesRecorded(logs *observer.ObservedLogs, worker string) int {
	n := 0
	for _, e := range logs.FilterMessage("CPU profile recorded").All() {
		if e.ContextMap()["worker"] == worker {
			n++
		}
	}
	return n
}
