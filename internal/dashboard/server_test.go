package dashboard

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirstream/weir/metrics"
)

func (s *Server) handlersRunning() int {
	s.serving.Lock()
	defer s.serving.Unlock()
	return s.serving.n
}

// Run returns only once the handlers of requests still in flight at its
// end returned (their contexts end with their connections): a 10-second
// trace requested just before the job ends does not outlive the server.
func TestRunWaitsForHandlers(t *testing.T) {
	s, err := Listen(Config{Addr: "127.0.0.1:0", Latest: func() *metrics.Job { return &metrics.Job{} }, UI: true, Pprof: true})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()

	answered := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr() + "/debug/pprof/trace?seconds=10")
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	deadline := time.After(30 * time.Second)
	for s.handlersRunning() == 0 {
		select {
		case err := <-answered:
			t.Fatalf("the trace request ended early: %v", err)
		case <-deadline:
			t.Fatal("the trace request never reached its handler")
		case <-time.After(5 * time.Millisecond): // polls the handler count
		}
	}
	cancel()
	require.NoError(t, <-ran)
	require.Zero(t, s.handlersRunning(), "Run returned with a handler still running")
	<-answered
}
