package dashboard

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"
)

// Profiling bounds.
const (
	// defaultProfileSeconds is a CPU profile's or trace's length without
	// ?seconds= (net/http/pprof's).
	defaultProfileSeconds = 30
	// DefaultMaxProfile bounds ?seconds=.
	DefaultMaxProfile = 5 * time.Minute
	// profileSlack is how much longer than the profile the response may
	// take to write.
	profileSlack = 10 * time.Second
	// MaxWorkerProfile bounds a worker's CPU profile (its control
	// connection carries it; cluster.MaxProfileMillis).
	MaxWorkerProfile = time.Minute
)

// ErrProfileBusy: a CPU profile of the process is being recorded already
// (runtime/pprof records one at a time); the API answers 409.
var ErrProfileBusy = errors.New("a CPU profile is being recorded already")

// CPUProfile records a CPU profile of this process for d and returns it
// in pprof's format. It returns ctx's error if ctx ends first (the
// recording stops then) and an error wrapping ErrProfileBusy while
// another CPU profile is being recorded in the process.
func CPUProfile(ctx context.Context, d time.Duration) ([]byte, error) {
	var buf profileBuffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProfileBusy, err)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		pprof.StopCPUProfile()
		return nil, ctx.Err()
	}
	pprof.StopCPUProfile() // waits for the profile's last write
	return buf.b, nil
}

// profiler serves net/http/pprof's routes under /debug/pprof/, written
// against runtime/pprof: importing net/http/pprof would register them on
// the program's http.DefaultServeMux too, which a library must not do.
// `go tool pprof http://ADDR/debug/pprof/profile?seconds=10` works as
// against net/http/pprof.
type profiler struct {
	max time.Duration
	// ctl, if set, profiles its workers (GET /taskmanagers/{id}/…).
	ctl Control
}

func (p *profiler) register(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/{$}", p.index)
	mux.HandleFunc("GET /debug/pprof/cmdline", p.cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", p.cpu)
	mux.HandleFunc("GET /debug/pprof/trace", p.trace)
	mux.HandleFunc("GET /debug/pprof/{profile}", p.named)
	mux.HandleFunc("GET /api/v1/flamegraph", p.flamegraph)
	if p.ctl != nil {
		mux.HandleFunc("GET /taskmanagers/{taskmanagerid}/flamegraph", p.workerFlamegraph)
		mux.HandleFunc("GET /taskmanagers/{taskmanagerid}/pprof/profile", p.workerProfile)
	}
}

func (p *profiler) index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	var b strings.Builder
	b.WriteString("<!DOCTYPE html><html><head><title>/debug/pprof/</title></head><body><h1>/debug/pprof/</h1>\n")
	b.WriteString("<p>Profiles of this process (add ?debug=1 for text, ?token=… if the dashboard has a token):</p>\n<table>\n")
	for _, prof := range pprof.Profiles() {
		n := html.EscapeString(prof.Name())
		fmt.Fprintf(&b, "<tr><td>%d</td><td><a href=\"%s?debug=1\">%s</a></td></tr>\n", prof.Count(), n, n)
	}
	b.WriteString("<tr><td></td><td><a href=\"profile?seconds=30\">profile</a> (CPU, ?seconds=N)</td></tr>\n")
	b.WriteString("<tr><td></td><td><a href=\"trace?seconds=5\">trace</a> (execution trace, ?seconds=N)</td></tr>\n")
	b.WriteString("<tr><td></td><td><a href=\"cmdline\">cmdline</a></td></tr>\n</table></body></html>\n")
	_, _ = w.Write([]byte(b.String()))
}

func (p *profiler) cmdline(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(strings.Join(os.Args, "\x00")))
}

// seconds parses ?seconds= (default def, at most p.max); false after
// answering 400.
func (p *profiler) seconds(w http.ResponseWriter, r *http.Request, def time.Duration) (time.Duration, bool) {
	d, err := profileLength(w, r, def, p.max)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return 0, false
	}
	return d, true
}

// profileLength parses ?seconds= (default def, at most max) and gives the
// response the time to write it (the server's write timeout is shorter
// than a profile).
func profileLength(w http.ResponseWriter, r *http.Request, def, max time.Duration) (time.Duration, error) {
	d := def
	if s := r.URL.Query().Get("seconds"); s != "" {
		n, err := strconv.ParseFloat(s, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("seconds %q: not a positive number", s)
		}
		d = time.Duration(n * float64(time.Second))
	}
	if d > max {
		return 0, fmt.Errorf("seconds: at most %v", max)
	}
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d + profileSlack))
	return d, nil
}

// sleep waits d or until the client went away or the server shut down;
// false in the latter cases.
func sleep(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// cpu takes a CPU profile of the process for ?seconds= (one at a time:
// 409 while another, or one the program took itself, runs).
func (p *profiler) cpu(w http.ResponseWriter, r *http.Request) {
	d, ok := p.seconds(w, r, defaultProfileSeconds*time.Second)
	if !ok {
		return
	}
	data, err := CPUProfile(r.Context(), d)
	if err != nil {
		profileError(w, err)
		return
	}
	writeProfile(w, data)
}

// writeProfile answers a CPU profile in pprof's format.
func writeProfile(w http.ResponseWriter, data []byte) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="profile"`)
	_, _ = w.Write(data)
}

// profileError answers why there is no profile: 409 while another is
// being recorded, nothing once the client went away or the server shuts
// down.
func profileError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
	case errors.Is(err, ErrProfileBusy):
		writeError(w, http.StatusConflict, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

// trace takes an execution trace for ?seconds=.
func (p *profiler) trace(w http.ResponseWriter, r *http.Request) {
	d, ok := p.seconds(w, r, defaultProfileSeconds*time.Second)
	if !ok {
		return
	}
	var buf profileBuffer
	if err := trace.Start(&buf); err != nil {
		writeError(w, http.StatusConflict, "a trace is being taken already: "+err.Error())
		return
	}
	done := sleep(r, d)
	trace.Stop()
	if done {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="trace"`)
		_, _ = w.Write(buf.b)
	}
}

// named writes a runtime/pprof profile: heap, allocs, goroutine, block,
// mutex, threadcreate (?debug=N for text; ?gc=1 collects garbage first).
func (p *profiler) named(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("profile")
	prof := pprof.Lookup(name)
	if prof == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no profile %q", name))
		return
	}
	debug, _ := strconv.Atoi(r.URL.Query().Get("debug"))
	if name == "heap" && r.URL.Query().Get("gc") != "" {
		runtime.GC()
	}
	if debug != 0 {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s"`, name))
	}
	_ = prof.WriteTo(w, debug)
}

// profileBuffer collects a profile before it is sent: the profiler's
// writes never wait for a slow client.
type profileBuffer struct{ b []byte }

func (b *profileBuffer) Write(p []byte) (int, error) {
	b.b = append(b.b, p...)
	return len(p), nil
}
