package network

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// scriptedListener is a net.Listener whose Accept returns the results
// of its script one by one (a nil error with a connection from net.Pipe
// when conn is set) and then blocks until Close. It records when each
// Accept call came, in the bubble's time.
type scriptedListener struct {
	script []acceptResult
	calls  []time.Time
	closed chan struct{}
	peers  []net.Conn // the client ends of the connections handed out
}

type acceptResult struct {
	err  error
	conn bool
}

func newScriptedListener(script ...acceptResult) *scriptedListener {
	return &scriptedListener{script: script, closed: make(chan struct{})}
}

func (l *scriptedListener) Accept() (net.Conn, error) {
	l.calls = append(l.calls, time.Now())
	if len(l.script) == 0 {
		<-l.closed
		return nil, net.ErrClosed
	}
	r := l.script[0]
	l.script = l.script[1:]
	if r.conn {
		srv, cli := net.Pipe()
		l.peers = append(l.peers, cli)
		return srv, nil
	}
	return nil, r.err
}

func (l *scriptedListener) Close() error {
	select {
	case <-l.closed:
	default:
		close(l.closed)
	}
	return nil
}

func (l *scriptedListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// temporary is an accept error net/http retries: a *net.OpError around
// EMFILE (too many open files) or ECONNABORTED.
func temporary(errno syscall.Errno) acceptResult {
	return acceptResult{err: &net.OpError{Op: "accept", Net: "tcp", Err: errno}}
}

// Temporary accept errors (a full file table, a connection aborted before
// it was accepted) are retried after a pause that starts at 5 ms and
// doubles up to 1 s, reset by a connection accepted, as net/http's
// Server.Serve does; the server goes on serving. A fatal error ends Serve
// with that error.
func TestServeRetriesTemporaryAcceptErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fatal := errors.New("listener broke")
		script := []acceptResult{temporary(syscall.EMFILE), temporary(syscall.ECONNABORTED), temporary(syscall.EMFILE),
			{conn: true}, temporary(syscall.ENFILE)}
		for range 9 {
			script = append(script, temporary(syscall.EMFILE))
		}
		script = append(script, acceptResult{err: fatal})
		ln := newScriptedListener(script...)
		srv, err := NewServer(ServerConfig{}, NewPartitionManager(), nil)
		require.NoError(t, err)
		start := time.Now()
		err = srv.Serve(context.Background(), ln)
		require.ErrorIs(t, err, fatal)
		require.NotErrorIs(t, err, ErrServerClosed)

		var pauses []time.Duration
		for i := 1; i < len(ln.calls); i++ {
			pauses = append(pauses, ln.calls[i].Sub(ln.calls[i-1]))
		}
		ms := time.Millisecond
		require.Equal(t, []time.Duration{5 * ms, 10 * ms, 20 * ms, 0, // the connection resets the pause
			5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, time.Second, time.Second, // capped at 1 s
		}, pauses)
		require.Equal(t, start, ln.calls[0])
		require.Equal(t, 1, srv.NumConnections(), "the accepted connection is served")
		for _, c := range ln.peers {
			c.Close()
		}
		require.NoError(t, srv.Close())
	})
}

// Close during a pause ends Serve at once with ErrServerClosed.
func TestServeCloseDuringAcceptBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		script := make([]acceptResult, 20)
		for i := range script {
			script[i] = temporary(syscall.EMFILE)
		}
		ln := newScriptedListener(script...)
		srv, err := NewServer(ServerConfig{}, NewPartitionManager(), nil)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, ln) }()
		time.Sleep(100 * time.Millisecond) // within the fifth pause (5+10+20+40 ms passed)
		synctest.Wait()
		require.Len(t, ln.calls, 5)
		cancel()
		require.ErrorIs(t, <-done, ErrServerClosed)
		require.Len(t, ln.calls, 5, "no accept after the server closed")
	})
}
