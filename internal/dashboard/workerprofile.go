package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// workerFlamegraph is GET /taskmanagers/{taskmanagerid}/flamegraph: a CPU
// profile of one worker's process for ?seconds= (default 5, at most
// MaxWorkerProfile) as a flame graph, the JSON of GET /api/v1/flamegraph.
func (p *profiler) workerFlamegraph(w http.ResponseWriter, r *http.Request) {
	if data, ok := p.workerCPU(w, r, defaultFlameSeconds); ok {
		writeFlameGraph(w, data, restError)
	}
}

// workerProfile is GET /taskmanagers/{taskmanagerid}/pprof/profile: a CPU
// profile of one worker's process for ?seconds= (default 30, at most
// MaxWorkerProfile) in pprof's format, for `go tool pprof URL`.
func (p *profiler) workerProfile(w http.ResponseWriter, r *http.Request) {
	if data, ok := p.workerCPU(w, r, defaultProfileSeconds*time.Second); ok {
		writeProfile(w, data)
	}
}

// workerCPU asks the job for a CPU profile of the worker of the path; it
// answers the errors itself (false), in the REST API's form.
func (p *profiler) workerCPU(w http.ResponseWriter, r *http.Request, def time.Duration) ([]byte, bool) {
	id := r.PathValue("taskmanagerid")
	known := false
	for _, wk := range p.ctl.Workers() {
		known = known || wk.ID == id
	}
	if !known {
		restError(w, http.StatusNotFound, fmt.Sprintf("no worker %q (GET /taskmanagers lists them)", id))
		return nil, false
	}
	d, err := profileLength(w, r, def, min(p.max, MaxWorkerProfile))
	if err != nil {
		restError(w, http.StatusBadRequest, err.Error())
		return nil, false
	}
	data, err := p.ctl.ProfileWorker(r.Context(), id, d)
	switch {
	case err == nil:
		return data, true
	case r.Context().Err() != nil:
		// The client went away, or the server shuts down: no answer.
	case errors.Is(err, ErrNoWorker):
		restError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, ErrProfileBusy), errors.Is(err, ErrConflict):
		restError(w, http.StatusConflict, err.Error())
	case errors.Is(err, ErrWorkerGone):
		restError(w, http.StatusBadGateway, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		restError(w, http.StatusGatewayTimeout, err.Error())
	default:
		restError(w, http.StatusInternalServerError, err.Error())
	}
	return nil, false
}
