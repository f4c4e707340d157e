package dashboard

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	maxHeaderBytes    = 32 << 10
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
	// Token, if set, must be presented to the API and /metrics, as
	// "Authorization: Bearer TOKEN" or the query parameter token=TOKEN.
	Token string
	// Latest returns the job's latest snapshot; it must not block.
	Latest func() *metrics.Job
	// UI serves the dashboard and its JSON API besides /metrics.
	UI bool
	// Refresh is how often the page polls the API (0: 1 s; at least
	// 250 ms).
	Refresh time.Duration
	Logger  *zap.Logger
}

// Server serves one job's dashboard, JSON API and Prometheus metrics.
type Server struct {
	ln  net.Listener
	srv *http.Server
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
	srv := &http.Server{
		Handler:           Handler(cfg),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          zap.NewStdLog(cfg.Logger.Named("http")),
	}
	return &Server{ln: ln, srv: srv}, nil
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
		return fmt.Errorf("dashboard: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		_ = s.srv.Close()
	}
	<-errc
	return nil
}

// Handler returns the server's routes (see docs/dashboard.md):
//
//	GET /                        the dashboard (UI)
//	GET /static/…                its script and style (UI)
//	GET /api/v1/job              the whole snapshot (UI)
//	GET /api/v1/vertices/{id}    one vertex with its subtasks (UI)
//	GET /api/v1/checkpoints      checkpoint counts, summary and history (UI)
//	GET /metrics                 Prometheus text exposition
//
// Anything else is a 404, another method than GET or HEAD a 405, and a
// missing or wrong token a 401.
func Handler(cfg Config) http.Handler {
	refresh := cfg.Refresh
	if refresh <= 0 {
		refresh = time.Second
	}
	refresh = max(refresh, minRefresh)
	h := &handler{latest: cfg.Latest, token: cfg.Token, refresh: refresh}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(cfg.Latest))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h.auth(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})))
	if cfg.UI {
		static, err := fs.Sub(assets, "assets")
		if err != nil {
			panic(err) // the embedded tree is fixed at build time
		}
		mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
			http.ServeFileFS(w, r, static, "index.html")
		})
		mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
		mux.Handle("GET /api/v1/job", h.auth(http.HandlerFunc(h.job)))
		mux.Handle("GET /api/v1/vertices/{id}", h.auth(http.HandlerFunc(h.vertex)))
		mux.Handle("GET /api/v1/checkpoints", h.auth(http.HandlerFunc(h.checkpoints)))
		mux.Handle("/api/", h.auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET, HEAD")
				writeError(w, http.StatusMethodNotAllowed, "the API is read-only: use GET")
				return
			}
			writeError(w, http.StatusNotFound, "no such resource: "+r.URL.Path)
		})))
	}
	return secure(mux)
}

// handler serves the API from the latest snapshot.
type handler struct {
	latest  func() *metrics.Job
	token   string
	refresh time.Duration
	cache   atomic.Pointer[encoded] // the latest snapshot's JSON
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
}

func (h *handler) job(w http.ResponseWriter, r *http.Request) {
	j := h.latest()
	c := h.cache.Load()
	if c == nil || c.job != j {
		body, err := json.Marshal(jobView{Job: j, Refresh: h.refresh.Milliseconds()})
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

func (h *handler) checkpoints(w http.ResponseWriter, r *http.Request) {
	j := h.latest()
	if j.Checkpoints == nil {
		writeError(w, http.StatusNotFound, "the job does not checkpoint")
		return
	}
	writeJSON(w, j.Checkpoints)
}

// auth requires the token, if one is set.
func (h *handler) auth(next http.Handler) http.Handler {
	if h.token == "" {
		return next
	}
	want := []byte(h.token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.URL.Query().Get("token")
		if a := r.Header.Get("Authorization"); a != "" {
			got, _ = strings.CutPrefix(a, "Bearer ")
		}
		if subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="weir"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// secure adds headers that keep the page self-contained and read-only:
// nothing is loaded from elsewhere, and no other site may frame it.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
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
