package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/weirstream/weir/internal/metrics"
)

//go:embed assets
var assets embed.FS

// Server timeouts: a slow or hung client holds only its own connection,
// and not for long.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 10 * time.Second
	idleTimeout       = 60 * time.Second
	shutdownTimeout   = 500 * time.Millisecond
	// handlerTimeout bounds the wait, after the connections closed, for
	// handlers still running (each ends with its request's context).
	handlerTimeout = 2 * time.Second
	maxHeaderBytes = 32 << 10
	// minRefresh bounds how often the page polls, whatever the metrics
	// interval.
	minRefresh = 250 * time.Millisecond
)

// Config configures a Server.
type Config struct {
	// Addr is host:port to listen on; an empty host means 127.0.0.1
	// (":8081" serves only this machine; "0.0.0.0:8081" every
	// interface).
	Addr string
	// Token, if set, must be presented on every route but the page and
	// its static files, as "Authorization: Bearer TOKEN" or the query
	// parameter token=TOKEN. Without it, requests are answered only if
	// their Host is this server's (see AllowedHosts).
	Token string
	// AllowedHosts are host names a server without a token answers to
	// besides loopback names and its listen address (behind a proxy, or
	// by the machine's name).
	AllowedHosts []string
	// Latest returns the job's latest snapshot; it must not block.
	Latest func() *metrics.Job
	// UI serves the dashboard and its JSON API besides /metrics.
	UI bool
	// Job, with UI, serves the REST API (/jobs/…, docs/rest.md) and its
	// actions.
	Job Control
	// Pprof, with UI, serves /debug/pprof/; MaxProfile bounds the length
	// of a CPU profile or trace (0: DefaultMaxProfile).
	Pprof      bool
	MaxProfile time.Duration
	// NoGoMetrics leaves the Go runtime's (go_*) and the process's
	// (process_*) collectors out of /metrics.
	NoGoMetrics bool
	// Linger is how long the server goes on answering once the job ended
	// after a stop or cancel asked through the API, so that the caller
	// can read the outcome (the savepoint's path); 0: at once.
	Linger time.Duration
	// Refresh is how often the page polls the API (0: 1 s; at least
	// 250 ms).
	Refresh time.Duration
	// History, with UI, serves the charts' series (GET /api/v1/history);
	// the job feeds it (nil: no charts).
	History *History
	Logger  *zap.Logger
}

// Server serves one job's dashboard, JSON API and Prometheus metrics.
type Server struct {
	ln     net.Listener
	srv    *http.Server
	ops    *operations
	linger time.Duration
	log    *zap.Logger
	// stopped is set once a stop or cancel was accepted through the API;
	// read is closed once the outcome of a finished stop was answered,
	// which ends the linger.
	stopped  atomic.Bool
	read     chan struct{}
	readOnce sync.Once
	// serving counts the handlers running; Run waits for them.
	serving struct {
		sync.Mutex
		closed bool
		n      int
		idle   chan struct{} // closed when n drops to 0 after closed
	}
}

// counted runs h unless Run is ending, counting it while it runs.
func (s *Server) counted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serving.Lock()
		if s.serving.closed {
			s.serving.Unlock()
			writeError(w, http.StatusServiceUnavailable, "the dashboard is shutting down")
			return
		}
		s.serving.n++
		s.serving.Unlock()
		defer func() {
			s.serving.Lock()
			if s.serving.n--; s.serving.n == 0 && s.serving.closed {
				close(s.serving.idle)
			}
			s.serving.Unlock()
		}()
		h.ServeHTTP(w, r)
	})
}

// awaitHandlers refuses new requests and waits up to d for the running
// handlers, whose requests' contexts ended with their connections; false
// if some still run.
func (s *Server) awaitHandlers(d time.Duration) bool {
	s.serving.Lock()
	s.serving.closed = true
	s.serving.idle = make(chan struct{})
	if s.serving.n == 0 {
		close(s.serving.idle)
	}
	idle := s.serving.idle
	s.serving.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return false
	}
}

// Listen binds cfg.Addr; Run serves. It fails if the address cannot be
// listened on.
func Listen(cfg Config) (*Server, error) {
	if cfg.Latest == nil {
		return nil, errors.New("dashboard: no metrics source")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	addr, err := LocalAddr(cfg.Addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	host, _, _ := net.SplitHostPort(addr)
	s := &Server{ln: ln, ops: newOperations(), linger: cfg.Linger, read: make(chan struct{}), log: cfg.Logger}
	s.srv = &http.Server{
		Handler:           s.counted(s.handler(cfg, host)),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          zap.NewStdLog(cfg.Logger.Named("http")),
	}
	return s, nil
}

// LocalAddr returns addr with an empty host replaced by 127.0.0.1.
func LocalAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("dashboard: address %q: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Run serves until ctx ends, then shuts down: requests in flight get
// shutdownTimeout to finish, then every connection is closed. It returns
// once no goroutine of the server is left.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		s.ops.close()
		return fmt.Errorf("dashboard: %w", err)
	}
	if s.stopped.Load() && s.linger > 0 {
		// The job ended as the API asked: answer a while longer.
		t := time.NewTimer(s.linger)
		select {
		case <-t.C:
		case <-s.read:
			t.Stop()
		case err := <-errc:
			t.Stop()
			s.ops.close()
			return fmt.Errorf("dashboard: %w", err)
		}
	}
	s.ops.close()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		_ = s.srv.Close()
	}
	<-errc
	if !s.awaitHandlers(handlerTimeout) {
		s.log.Warn("dashboard: requests still being answered after shutdown", zap.Duration("waited", handlerTimeout))
	}
	return nil
}

// handler returns the server's routes (see docs/dashboard.md and
// docs/rest.md):
//
//	GET /                        the dashboard (UI)
//	GET /static/…                its script and style (UI)
//	GET /api/v1/job              the whole snapshot (UI)
//	GET /api/v1/vertices/{id}    one vertex with its subtasks (UI)
//	GET /api/v1/checkpoints      checkpoint counts, summary and history (UI)
//	GET /api/v1/history          the charts' last 10 minutes (UI and History)
//	    /jobs/…                  Flink's REST API and its actions (UI and Job)
//	GET /debug/pprof/…           profiles (UI and Pprof)
//	GET /api/v1/flamegraph       a CPU profile as a flame graph (UI and Pprof)
//	GET /taskmanagers/{id}/flamegraph, /taskmanagers/{id}/pprof/profile
//	                             a worker's CPU profile (UI, Job and Pprof)
//	GET /metrics                 Prometheus text exposition
//
// Anything else is a 404, another method than a route's a 405, a missing
// or wrong token a 401 (on every route but the page's), and without a
// token a request for another host a 403.
func (s *Server) handler(cfg Config, listenHost string) http.Handler {
	refresh := cfg.Refresh
	if refresh <= 0 {
		refresh = time.Second
	}
	refresh = max(refresh, minRefresh)
	h := &handler{latest: cfg.Latest, refresh: refresh, history: cfg.History, profiling: cfg.UI && cfg.Pprof}
	if cfg.Job != nil {
		h.jid = cfg.Job.JobID()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(cfg.Latest))
	if !cfg.NoGoMetrics {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	if cfg.UI {
		static, err := fs.Sub(assets, "assets")
		if err != nil {
			panic(err) // the embedded tree is fixed at build time
		}
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
			http.ServeFileFS(w, r, static, "index.html")
		})
		mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
		mux.HandleFunc("GET /api/v1/job", h.job)
		mux.HandleFunc("GET /api/v1/vertices/{id}", h.vertex)
		mux.HandleFunc("GET /api/v1/checkpoints", h.checkpoints)
		if cfg.History != nil {
			mux.HandleFunc("GET /api/v1/history", h.historySince)
		}
		mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET, HEAD")
				writeError(w, http.StatusMethodNotAllowed, "the API is read-only: use GET")
				return
			}
			writeError(w, http.StatusNotFound, "no such resource: "+r.URL.Path)
		})
		if cfg.Job != nil {
			(&restAPI{ctl: cfg.Job, latest: cfg.Latest, ops: s.ops, stopped: func() { s.stopped.Store(true) },
				read: func() { s.readOnce.Do(func() { close(s.read) }) }}).register(mux)
		}
		if cfg.Pprof {
			p := &profiler{max: cfg.MaxProfile, ctl: cfg.Job}
			if p.max <= 0 {
				p.max = DefaultMaxProfile
			}
			p.register(mux)
		}
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { notFound(mux, w, r) })
	var next http.Handler = auth(cfg.Token, mux)
	if cfg.Token == "" {
		next = hostCheck(listenHost, cfg.AllowedHosts, next)
	}
	return secure(next)
}

// notFound answers a request no route took: 405 with the methods of the
// routes of its path, or 404.
func notFound(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPatch} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, strings.Join(allow, " or ")))
		return
	}
	writeError(w, http.StatusNotFound, "no such resource: "+r.URL.Path)
}

// handler serves the API from the latest snapshot.
type handler struct {
	latest  func() *metrics.Job
	refresh time.Duration
	history *History
	jid     string                  // the REST API's job ID ("": no REST API)
	cache   atomic.Pointer[encoded] // the latest snapshot's JSON
	// profiling: /debug/pprof/ and the flame graph are served.
	profiling bool
}

type encoded struct {
	job  *metrics.Job
	body []byte
}

// jobView is the JSON of GET /api/v1/job: the snapshot and how often to
// poll it.
type jobView struct {
	*metrics.Job
	// Refresh is how often the page polls, in ms.
	Refresh int64 `json:"refresh"`
	// JID is the job's ID in the REST API's paths (omitted without it).
	JID string `json:"jid,omitempty"`
	// Charts says whether GET /api/v1/history serves the charts;
	// Profiling whether /debug/pprof/ and GET /api/v1/flamegraph are
	// served.
	Charts    bool `json:"charts"`
	Profiling bool `json:"profiling"`
}

func (h *handler) job(w http.ResponseWriter, r *http.Request) {
	j := h.latest()
	c := h.cache.Load()
	if c == nil || c.job != j {
		body, err := json.Marshal(jobView{Job: j, Refresh: h.refresh.Milliseconds(), JID: h.jid, Charts: h.history != nil,
			Profiling: h.profiling})
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		c = &encoded{job: j, body: body}
		h.cache.Store(c)
	}
	writeBody(w, c.body)
}

func (h *handler) vertex(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	j := h.latest()
	for i := range j.Vertices {
		if j.Vertices[i].ID == id {
			writeJSON(w, &j.Vertices[i])
			return
		}
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("no vertex %q", id))
}

// historySince answers the charts' points after ?since= (unix ms; none:
// the whole window).
func (h *handler) historySince(w http.ResponseWriter, r *http.Request) {
	var since int64
	if s := r.URL.Query().Get("since"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("since %q: not a time in unix ms", s))
			return
		}
		since = n
	}
	writeJSON(w, h.history.Since(since))
}

func (h *handler) checkpoints(w http.ResponseWriter, r *http.Request) {
	j := h.latest()
	if j.Checkpoints == nil {
		writeError(w, http.StatusNotFound, "the job does not checkpoint")
		return
	}
	writeJSON(w, j.Checkpoints)
}

func writeJSON(w http.ResponseWriter, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeBody(w, body)
}

func writeBody(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(body)
}

// apiError is the body of every error response of the API.
type apiError struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	body, _ := json.Marshal(apiError{Error: msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// Close releases the listener of a server that never ran.
func (s *Server) Close() { _ = s.ln.Close() }
