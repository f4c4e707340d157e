package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"
)

// Defaults of ServerConfig and WorkerConfig fields left zero.
const (
	DefaultHeartbeatInterval = time.Second
	DefaultHeartbeatTimeout  = 5 * time.Second
	DefaultRegisterTimeout   = 10 * time.Second
	DefaultDialTimeout       = 10 * time.Second
	DefaultQueueSize         = 1024
)

// ServerConfig configures a Server. Zero values mean the documented
// defaults.
type ServerConfig struct {
	// TLS, if set, secures the listener. Set ClientAuth to
	// tls.RequireAndVerifyClientCert (with ClientCAs) for mutual TLS.
	TLS *tls.Config
	// Token, if set, must be presented by every worker (WorkerConfig.Token);
	// a stream with a wrong or missing token ends with
	// codes.Unauthenticated. Without TLS it travels in clear text.
	Token string
	// Fingerprint identifies the job graph; a worker registering with a
	// different one is rejected with codes.FailedPrecondition.
	Fingerprint string
	// HeartbeatInterval is how often the server sends each worker a
	// heartbeat (default 1 s).
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long a worker may stay silent before it is
	// lost and its stream ended (default 5 s; must exceed
	// HeartbeatInterval).
	HeartbeatTimeout time.Duration
	// RegisterTimeout is how long a new stream may take to send Register
	// (default 10 s).
	RegisterTimeout time.Duration
	// QueueSize bounds the messages queued per worker; Send blocks (until
	// its ctx ends) while the queue is full (default 1024).
	QueueSize int
	// Logger receives connection events (nil: no logging).
	Logger *zap.Logger
}

func (c *ServerConfig) ensureDefaults() {
	c.HeartbeatInterval = orDuration(c.HeartbeatInterval, DefaultHeartbeatInterval)
	c.HeartbeatTimeout = orDuration(c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	c.RegisterTimeout = orDuration(c.RegisterTimeout, DefaultRegisterTimeout)
	if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// Validate reports the first invalid field of c, after applying defaults
// to a copy.
func (c ServerConfig) Validate() error {
	c.ensureDefaults()
	return validateCommon(c.HeartbeatInterval, c.HeartbeatTimeout, c.QueueSize, "RegisterTimeout", c.RegisterTimeout)
}

// WorkerConfig configures RunWorker. Zero values mean the documented
// defaults.
type WorkerConfig struct {
	// Coordinator is the coordinator's address: host:port, or a gRPC
	// target such as "dns:///coordinator:7000".
	Coordinator string
	// TLS, if set, secures the connection (set Certificates for mutual
	// TLS). Nil means plain text.
	TLS *tls.Config
	// Token is presented to the coordinator (ServerConfig.Token).
	Token string
	// Register is the worker's registration; WorkerID is required.
	Register Register
	// HeartbeatInterval is how often the worker sends a heartbeat
	// (default 1 s).
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long the coordinator may stay silent before
	// the worker considers it lost (default 5 s; must exceed
	// HeartbeatInterval).
	HeartbeatTimeout time.Duration
	// DialTimeout bounds one attempt to connect and register (default
	// 10 s).
	DialTimeout time.Duration
	// RetryTimeout bounds the time spent retrying failed attempts before
	// the first successful registration; 0 retries until ctx ends.
	RetryTimeout time.Duration
	// QueueSize bounds the messages queued by Session.Send; Send blocks
	// (until its ctx ends) while the queue is full (default 1024).
	QueueSize int
	// Logger receives connection events (nil: no logging).
	Logger *zap.Logger

	// dial, if set, opens the connection to Coordinator instead of TCP: the
	// tests' seam for an in-memory network, on which a whole session runs
	// inside a testing/synctest bubble.
	dial func(ctx context.Context, addr string) (net.Conn, error)
}

func (c *WorkerConfig) ensureDefaults() {
	c.HeartbeatInterval = orDuration(c.HeartbeatInterval, DefaultHeartbeatInterval)
	c.HeartbeatTimeout = orDuration(c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	c.DialTimeout = orDuration(c.DialTimeout, DefaultDialTimeout)
	if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// Validate reports the first invalid field of c, after applying defaults
// to a copy.
func (c WorkerConfig) Validate() error {
	c.ensureDefaults()
	switch {
	case c.Coordinator == "":
		return errors.New("cluster: WorkerConfig.Coordinator is empty")
	case c.Register.WorkerID == "":
		return errors.New("cluster: WorkerConfig.Register.WorkerID is empty")
	case c.Register.Slots < 0:
		return fmt.Errorf("cluster: WorkerConfig.Register.Slots %d is negative", c.Register.Slots)
	case c.RetryTimeout < 0:
		return fmt.Errorf("cluster: WorkerConfig.RetryTimeout %v is negative", c.RetryTimeout)
	}
	return validateCommon(c.HeartbeatInterval, c.HeartbeatTimeout, c.QueueSize, "DialTimeout", c.DialTimeout)
}

func validateCommon(interval, timeout time.Duration, queue int, name string, d time.Duration) error {
	switch {
	case interval < 0:
		return fmt.Errorf("cluster: HeartbeatInterval %v is negative", interval)
	case timeout <= interval:
		return fmt.Errorf("cluster: HeartbeatTimeout %v must exceed HeartbeatInterval %v", timeout, interval)
	case queue < 0:
		return fmt.Errorf("cluster: QueueSize %d is negative", queue)
	case d < 0:
		return fmt.Errorf("cluster: %s %v is negative", name, d)
	}
	return nil
}

func orDuration(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
