// Package etcdserver runs an etcd server inside this process, on loopback
// ports, for tests and examples of weir's high availability (package ha).
// A Server is one single-member etcd cluster whose data lives in a
// directory of the caller's; it can be stopped and started again on the
// same ports and data, as an etcd outage would.
package etcdserver

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is an etcd server in this process.
type Server struct {
	dir          string
	client, peer url.URL

	mu struct {
		sync.Mutex
		e *embed.Etcd
	}
}

// Start starts a server with its data in dir, on free loopback ports.
func Start(dir string) (*Server, error) {
	cp, err := freePort()
	if err != nil {
		return nil, err
	}
	pp, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir,
		client: url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", cp)},
		peer:   url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", pp)}}
	if err := s.Restart(); err != nil {
		return nil, err
	}
	return s, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("etcdserver: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Endpoint is the client URL.
func (s *Server) Endpoint() string { return s.client.String() }

// Restart starts the server again after Stop, on the same ports and data;
// it is how Start starts it the first time.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.e != nil {
		return errors.New("etcdserver: already running")
	}
	cfg := embed.NewConfig()
	cfg.Name = "weir"
	cfg.Dir = s.dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{s.client}, []url.URL{s.client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{s.peer}, []url.URL{s.peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// Tests and examples need no durability across machine crashes.
	cfg.UnsafeNoFsync = true
	// A single member elects itself within a tick or two.
	cfg.TickMs, cfg.ElectionMs = 50, 500
	var e *embed.Etcd
	var err error
	// The ports were free a moment ago; a restart may find them still in
	// TIME_WAIT on some systems: retry briefly.
	for i := 0; ; i++ {
		if e, err = embed.StartEtcd(cfg); err == nil || i == 20 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("etcdserver: starting: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return errors.New("etcdserver: not ready within 30 s")
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcdserver: %w", err)
	}
	s.mu.e = e
	return nil
}

// Stop stops the server; its data stays for Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	e := s.mu.e
	s.mu.e = nil
	s.mu.Unlock()
	if e != nil {
		e.Close()
	}
}
