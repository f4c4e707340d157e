package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/weirstream/weir"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lines is a writer that counts the lines written to it.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The example prints closing windows and serves its dashboard until it
// is stopped, and then returns nil.
func TestExampleRunsUntilStopped(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	stopCtx, stop := context.WithCancel(ctx)
	out := &lines{}
	var job *weir.Job
	jobc := make(chan *weir.Job, 1)
	errc := make(chan error, 1)
	cfg := config{dashboard: "127.0.0.1:0", rate: 2000, sensors: 3, parallelism: 2, window: 100 * time.Millisecond}
	go func() { errc <- run(stopCtx, cfg, zaptest.NewLogger(t), out, func(j *weir.Job) { jobc <- j }) }()
	select {
	case job = <-jobc:
	case err := <-errc:
		t.Fatal(err)
	}
	for !strings.Contains(out.String(), "sensor 2 ") {
		select {
		case <-ctx.Done():
			t.Fatalf("no window closed; output: %q", out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+job.DashboardAddr()+"/api/v1/job", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), `"name":"sensors"`)
	http.DefaultClient.CloseIdleConnections()
	stop()
	require.NoError(t, <-errc)
}

// The README's back-pressure demo: with a sink slower than the results
// it gets, the dashboard's JSON API shows the windows and the sources
// back-pressured ("high") and the sink busy, as the page colours them.
func TestSlowSinkBackPressuresUpstream(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a guard against a hang
	defer cancel()
	stopCtx, stop := context.WithCancel(ctx)
	defer stop()
	jobc := make(chan *weir.Job, 1)
	errc := make(chan error, 1)
	cfg := config{dashboard: "127.0.0.1:0", rate: 20000, sensors: 8, parallelism: 2,
		window: 10 * time.Millisecond, slow: 20 * time.Millisecond, metricsInterval: 100 * time.Millisecond}
	go func() { errc <- run(stopCtx, cfg, zaptest.NewLogger(t), io.Discard, func(j *weir.Job) { jobc <- j }) }()
	var job *weir.Job
	select {
	case job = <-jobc:
	case err := <-errc:
		t.Fatal(err)
	}
	var last string
	for {
		levels, err := backPressure(ctx, "http://"+job.DashboardAddr()+"/api/v1/job")
		require.NoError(t, err)
		last = fmt.Sprint(levels)
		if levels["sensors -> timestamps/watermarks"] == "high" && levels["window aggregate"] == "high" && levels["print"] == "ok" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no back pressure upstream of the slow sink; the dashboard's levels: %s", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
	http.DefaultClient.CloseIdleConnections()
	stop()
	require.NoError(t, <-errc)
}

// backPressure reads the job's back-pressure level per vertex from the
// dashboard's JSON API.
func backPressure(ctx context.Context, url string) (map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var j weir.JobMetrics
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		return nil, err
	}
	levels := map[string]string{}
	for _, v := range j.Vertices {
		levels[v.Name] = v.BackPressure
	}
	return levels, nil
}
