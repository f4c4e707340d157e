// Package natstest runs a real NATS server with JetStream inside the
// process (github.com/nats-io/nats-server/v2), on a loopback port, for
// the tests and examples of weir's NATS connector. It can shut the
// server down and start it again on the same port and store, as a
// server restart does.
package natstest

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is one in-process NATS server with JetStream, storing its
// streams in a directory.
type Server struct {
	dir  string
	port int

	mu sync.Mutex
	s  *server.Server // nil while down
}

// startTimeout bounds the wait for a started server to take connections.
const startTimeout = 10 * time.Second

// Start starts a server storing its streams in dir (file storage), on a
// free loopback port.
func Start(dir string) (*Server, error) {
	srv := &Server{dir: dir, port: -1}
	if err := srv.Up(); err != nil {
		return nil, err
	}
	return srv, nil
}

// Up starts the server again after Down, on the same port and store. It
// does nothing if the server is up.
func (srv *Server) Up() error {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.s != nil {
		return nil
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: srv.port, JetStream: true, StoreDir: srv.dir,
		NoLog: true, NoSigs: true, MaxPayload: 8 << 20})
	if err != nil {
		return fmt.Errorf("natstest: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(startTimeout) {
		s.Shutdown()
		s.WaitForShutdown()
		return fmt.Errorf("natstest: the server did not take connections within %v", startTimeout)
	}
	if !s.JetStreamEnabled() {
		s.Shutdown()
		s.WaitForShutdown()
		return errors.New("natstest: JetStream did not start")
	}
	if srv.port == -1 {
		srv.port = s.Addr().(*net.TCPAddr).Port
	}
	srv.s = s
	return nil
}

// Down shuts the server down (its clients lose their connections); Up
// brings it back with its streams.
func (srv *Server) Down() {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.s == nil {
		return
	}
	srv.s.Shutdown()
	srv.s.WaitForShutdown()
	srv.s = nil
}

// Restart shuts the server down and starts it again after down.
func (srv *Server) Restart(down time.Duration) error {
	srv.Down()
	time.Sleep(down)
	return srv.Up()
}

// URL is the server's client URL (the same across restarts).
func (srv *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", srv.port) }

// Close shuts the server down for good.
func (srv *Server) Close() { srv.Down() }
